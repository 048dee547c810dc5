"""The environment every worker gets (torchrun's contract, ddprun(1) ENVIRONMENT) and what
runs: the program itself, *.py with Python -u, -m module, ${local_rank}."""
import os

import pytest

from conftest import PYTHON, binary, run


CONTRACT = [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
    "OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING",
    "TORCHELASTIC_SIGNALS_TO_HANDLE", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED",
]


def base_env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in CONTRACT and not k.startswith("PET_")}
    e.update(extra)
    return e


def worker_envs(tmp_path, args, env, key="LOCAL_RANK"):
    """Run `ddprun ARGS sh -c 'env > DIR/env.$LOCAL_RANK'`; {local_rank: {k: v}}."""
    cmd = [binary("ddprun"), *args, "sh", "-c", f'env > {tmp_path}/env.${key}']
    r = run(cmd, env=env)
    assert r.returncode == 0, r.stderr
    out = {}
    for name in os.listdir(tmp_path):
        if name.startswith("env."):
            with open(tmp_path / name) as f:
                out[int(name[4:])] = dict(line.rstrip("\n").split("=", 1)
                                          for line in f if "=" in line)
    return out


def test_every_worker_gets_the_contract(tmp_path):
    envs = worker_envs(tmp_path, ["--nproc-per-node", "4", "--max-restarts", "2",
                                  "--rdzv-id", "run42", "--role", "trainer"],
                       base_env(KEEP_ME="inherited"))
    assert sorted(envs) == [0, 1, 2, 3]
    ports = set()
    for lr, e in envs.items():
        assert e["RANK"] == str(lr) and e["LOCAL_RANK"] == str(lr)
        assert e["ROLE_RANK"] == str(lr)
        assert e["WORLD_SIZE"] == e["LOCAL_WORLD_SIZE"] == e["ROLE_WORLD_SIZE"] == "4"
        assert e["GROUP_RANK"] == "0" and e["GROUP_WORLD_SIZE"] == "1"
        assert e["ROLE_NAME"] == "trainer"
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert 0 < int(e["MASTER_PORT"]) < 65536
        ports.add(e["MASTER_PORT"])
        assert e["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert e["TORCHELASTIC_MAX_RESTARTS"] == "2"
        assert e["TORCHELASTIC_RUN_ID"] == "run42"
        assert e["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        # Without --log-dir: flat, in a private temporary directory.
        assert e["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0.{lr}.error.json")
        assert e["OMP_NUM_THREADS"] == "1"
        assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        # PyTorch 1.13 reads only the old name; torchrun 2.x's agent exports
        # its --signals-to-handle (issue 12).
        assert e["NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert e["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
        assert "CUDA_VISIBLE_DEVICES" not in e
        # The -u of a Python program, for the Python a wrapper starts too.
        assert e["PYTHONUNBUFFERED"] == "1"
        assert e["KEEP_ME"] == "inherited"
    assert len(ports) == 1


@pytest.mark.parametrize("pet", [False, True])
def test_error_files_follow_torchruns_layout_with_a_log_dir(tmp_path, pet):
    logs = tmp_path / "logs"
    out = tmp_path / "out"
    out.mkdir()
    if pet:
        envs = worker_envs(out, ["--nproc-per-node", "2"], base_env(PET_LOG_DIR=str(logs)))
    else:
        envs = worker_envs(out, ["--nproc-per-node", "2", "--log-dir", str(logs)], base_env())
    for lr, e in envs.items():
        f = e["TORCHELASTIC_ERROR_FILE"]
        # <run id>_<random>: the run id is torchrun 2.11+'s fresh uuid4 here
        assert f.startswith(str(logs) + "/" + e["TORCHELASTIC_RUN_ID"] + "_")
        assert f.endswith(f"/attempt_0/{lr}/error.json")
        assert os.path.isdir(os.path.dirname(f))


@pytest.mark.parametrize("args, pet", [(["--log-dir", ""], None), (["--log-dir="], None),
                                       ([], "")])
def test_an_empty_log_dir_is_no_log_dir(tmp_path, args, pet):
    """torchrun's `if not log_dir`: a temporary directory; it was a usage error."""
    env = base_env() if pet is None else base_env(PET_LOG_DIR=pet)
    envs = worker_envs(tmp_path, ["--nproc-per-node", "2", *args], env)
    tmpdir = os.environ["TMPDIR"]
    for lr, e in envs.items():
        f = e["TORCHELASTIC_ERROR_FILE"]
        assert f.startswith(tmpdir + "/ddprun_") and f.endswith(f"/attempt_0.{lr}.error.json")
    # With -r it keeps torchrun's layout, in a temporary base that stays.
    r = run([binary("ddprun"), *args, "-r", "3", "sh", "-c", "echo hi"], env=env)
    assert r.returncode == 0, r.stderr
    (base,) = [d for d in os.listdir(tmpdir) if d.startswith("ddprun_")]
    (run_dir,) = os.listdir(os.path.join(tmpdir, base))
    with open(os.path.join(tmpdir, base, run_dir, "attempt_0", "0", "stdout.log")) as f:
        assert f.read() == "hi\n"


@pytest.mark.parametrize("pet", [False, True])
def test_log_dir_dev_null_is_no_logs_as_in_torchrun_2(tmp_path, pet):
    """torchrun 2.x's --log-dir /dev/null (os.devnull): no directory, the
    output on the console whatever -r/-t say, TORCHELASTIC_ERROR_FILE empty.
    ddprun refused it: "cannot create log directory /dev/null: Not a
    directory" (found by a hostile review)."""
    args = ["--nproc-per-node", "2", "-r", "3", "-t", "0:3"]
    env = base_env(PET_LOG_DIR="/dev/null") if pet else base_env()
    if not pet:
        args += ["--log-dir", "/dev/null"]
    # Rank 1 fails only once rank 0 has written (its failure stops rank 0,
    # which a slow machine had not yet started: CI saw no "out 0").
    done = tmp_path / "rank0-wrote"
    r = run([binary("ddprun"), *args, "sh", "-c",
             'echo "out $LOCAL_RANK [$TORCHELASTIC_ERROR_FILE] [$(ls "$TMPDIR")]"; '
             'echo "err $LOCAL_RANK" >&2; '
             f'[ "$LOCAL_RANK" = 0 ] && {{ touch {done}; exit 0; }}; '
             f'i=0; while [ ! -e {done} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; '
             'exit 3'], env=env)
    assert r.returncode == 3, r.stderr
    # Not even a temporary directory while it runs (nothing is written).
    assert sorted(r.stdout.splitlines()) == ["out 0 [] []", "out 1 [] []"], r.stdout
    assert "err 0" in r.stderr and "err 1" in r.stderr, r.stderr
    assert "error_file: <N/A>" in r.stderr, r.stderr
    assert os.listdir(os.environ["TMPDIR"]) == []
    # Its copy goes into the log directory: none, whatever -t says (it
    # blamed -t).
    r = run([binary("ddprun"), *args, "--duplicate-stdout-filters", "x", "/bin/true"], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ("ddprun: warning: --duplicate-stdout-filters writes its copy into the "
                        "log directory, and --log-dir /dev/null writes no logs: no line is "
                        "copied\n"), r.stderr


def test_a_tmpdir_that_does_not_exist_falls_back_as_pythons_tempfile():
    """torchrun's tempfile passes over an unusable TMPDIR (then TEMP, TMP, /tmp, ...);
    ddprun failed: 'cannot create /nonexistent/ddprun_...'."""
    r = run([binary("ddprun"), "/bin/echo", "x"],
            env=base_env(TMPDIR="/nonexistent/ddprun-test"))
    assert (r.returncode, r.stdout, r.stderr) == (0, "x\n", "")


def test_the_next_usable_temporary_directory_holds_the_files(tmp_path):
    """The error files and the file timer's FIFO: in $TEMP when $TMPDIR is missing."""
    temp = tmp_path / "temp"
    temp.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    env = base_env(TMPDIR=str(tmp_path / "missing"), TEMP=str(temp),
                   TORCHELASTIC_ENABLE_FILE_TIMER="1")
    env.pop("TORCHELASTIC_TIMER_FILE", None)
    envs = worker_envs(out, ["--nproc-per-node", "2"], env)
    for lr, e in envs.items():
        assert e["TORCHELASTIC_ERROR_FILE"].startswith(f"{temp}/ddprun_")
        assert e["TORCHELASTIC_TIMER_FILE"].startswith(f"{temp}/watchdog_timer_")
    assert os.listdir(temp) == []  # both removed at the end


def test_user_settings_and_stale_values_in_the_environment(tmp_path):
    # The user's OMP_NUM_THREADS / TORCH_NCCL_ASYNC_ERROR_HANDLING win; a stale
    # RANK from an outer launcher does not leak into the workers.
    envs = worker_envs(tmp_path, ["--nproc-per-node", "2"],
                       base_env(OMP_NUM_THREADS="7", TORCH_NCCL_ASYNC_ERROR_HANDLING="0",
                                RANK="99", WORLD_SIZE="99", PYTHONUNBUFFERED=""))
    for lr, e in envs.items():
        assert e["OMP_NUM_THREADS"] == "7"
        assert e["PYTHONUNBUFFERED"] == ""  # set, even empty: the user's
        assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
        assert e["NCCL_ASYNC_ERROR_HANDLING"] == "0"  # follows the user's new name
        assert e["RANK"] == str(lr) and e["WORLD_SIZE"] == "2"


def test_signals_to_handle_reach_the_workers_as_given(tmp_path):
    envs = worker_envs(tmp_path, ["--signals-to-handle", "SIGTERM, SIGUSR1"],
                       base_env(NCCL_ASYNC_ERROR_HANDLING="2"))
    assert envs[0]["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM, SIGUSR1"
    assert envs[0]["NCCL_ASYNC_ERROR_HANDLING"] == "2"
    assert envs[0]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_virtual_local_rank_narrows_cuda_visible_devices(tmp_path):
    # torchrun 2.x: LOCAL_RANK=0 for all, each sees only its GPU (entry
    # local_rank of the parent's CUDA_VISIBLE_DEVICES, or local_rank itself).
    envs = worker_envs(tmp_path, ["--nproc-per-node", "3", "--virtual-local-rank"],
                       base_env(CUDA_VISIBLE_DEVICES="5,GPU-abc, 7"), key="RANK")
    assert sorted(envs) == [0, 1, 2]
    assert [envs[r]["LOCAL_RANK"] for r in range(3)] == ["0", "0", "0"]
    assert [envs[r]["CUDA_VISIBLE_DEVICES"] for r in range(3)] == ["5", "GPU-abc", "7"]
    out = tmp_path / "bare"
    out.mkdir()
    envs = worker_envs(out, ["--nproc_per_node", "2"], base_env(PET_VIRTUAL_LOCAL_RANK="1"),
                       key="RANK")
    assert [envs[r]["CUDA_VISIBLE_DEVICES"] for r in range(2)] == ["0", "1"]
    assert [envs[r]["LOCAL_RANK"] for r in range(2)] == ["0", "0"]


def test_virtual_local_rank_without_a_gpu_per_worker_is_a_usage_error(tmp_path):
    r = run([binary("ddprun"), "--nproc-per-node", "3", "--virtual-local-rank", "/bin/true"],
            env=base_env(CUDA_VISIBLE_DEVICES="0,1"))
    assert r.returncode == 2
    assert r.stderr.strip() == ("ddprun: error: --virtual-local-rank: local rank 2 has no GPU "
                                "in CUDA_VISIBLE_DEVICES=0,1")


def test_one_worker_does_not_force_omp_threads(tmp_path):
    envs = worker_envs(tmp_path, ["--nproc-per-node", "1"], base_env())
    assert "OMP_NUM_THREADS" not in envs[0]


def test_explicit_master_addr_and_port_are_exported(tmp_path):
    """A name is exported as the numeric address the store listens on (ddprun(1),
    --master-addr: never a name the workers would resolve again)."""
    import socket
    from conftest import free_port
    port = free_port()
    envs = worker_envs(tmp_path, ["--nproc-per-node", "2", "--master-addr", "localhost",
                                  "--master-port", str(port)], base_env())
    numeric = {a[4][0] for a in socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)}
    for e in envs.values():
        assert e["MASTER_ADDR"] in numeric and e["MASTER_PORT"] == str(port)
    envs = worker_envs(tmp_path, ["--standalone", "--master-addr", "localhost"], base_env())
    assert envs[0]["MASTER_ADDR"] in numeric


def test_local_rank_macro_is_replaced_in_arguments():
    r = run([binary("ddprun"), "--nproc-per-node", "3", "sh", "-c",
             'echo "$1 $2"', "sh", "--local-rank=${local_rank}", "x$local_rank.y"])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [
        "--local-rank=0 x0.y", "--local-rank=1 x1.y", "--local-rank=2 x2.y"]


def test_py_script_runs_unbuffered_with_python_exec(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import sys, os\n"
                      "argv = open('/proc/self/cmdline').read().split('\\0')\n"
                      "print(argv[1] == '-u', os.environ['RANK'], sys.argv[1:])\n")
    r = run([binary("ddprun"), "--nproc-per-node", "2", str(script), "a", "b"],
            env=base_env(PYTHON_EXEC=PYTHON))
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["True 0 ['a', 'b']", "True 1 ['a', 'b']"]


def test_module_runs_with_python_m(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text("import os\n"
                                "argv = open('/proc/self/cmdline').read().split('\\0')\n"
                                "print('module', os.environ['LOCAL_RANK'], argv[1:3])\n")
    r = run([binary("ddprun"), "--nproc-per-node", "2", "-m", "mypkg.job"],
            env=base_env(PYTHON_EXEC=PYTHON, PYTHONPATH=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["module 0 ['-u', '-m']", "module 1 ['-u', '-m']"]


def test_no_python_execs_a_py_file_directly(tmp_path):
    script = tmp_path / "direct.py"
    script.write_text("#!/bin/sh\necho direct $LOCAL_RANK\n")
    os.chmod(script, 0o755)
    r = run([binary("ddprun"), "--no-python", str(script)],
            env=base_env(PYTHON_EXEC="/nonexistent/python"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "direct 0\n"


def test_workers_inherit_no_descriptors_and_run_in_their_own_session(tmp_path):
    fd = os.open(os.devnull, os.O_RDONLY)  # inheritable, as from a careless parent
    os.set_inheritable(fd, True)
    try:
        r = run([binary("ddprun"), "--nproc-per-node", "2", PYTHON, "-c",
                 "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')),"
                 " os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())"],
                pass_fds=(fd,), env=base_env())
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    # 0-2 and the one listdir itself opens.
    assert r.stdout.splitlines() == ["[0, 1, 2, 3] True True"] * 2


def test_workers_share_the_store_ddprun_hosts():
    # Every worker writes its key into the agent's store (MASTER_ADDR:PORT),
    # waits for all three, and reads its neighbour's.
    ds = binary("ddpstore")
    script = (f'{ds} --timeout 30 set key.$RANK "from $RANK" && '
              f'{ds} --timeout 30 wait key.0 key.1 key.2 && '
              f'{ds} --timeout 30 get key.$(( (RANK + 1) % 3 ))')
    r = run([binary("ddprun"), "--nproc-per-node", "3", "sh", "-c", script], env=base_env())
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == ["from 0", "from 1", "from 2"]


@pytest.mark.parametrize("given", ["--master-port", "PET_MASTER_PORT", "--rdzv-endpoint"])
def test_explicit_master_port_that_is_taken_is_a_clear_error(given):
    """The line names what gave the port (it said --master-port of each)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        env = base_env()
        args = {"--master-port": ["--master-port", str(port)],
                "--rdzv-endpoint": ["--rdzv-endpoint", f"127.0.0.1:{port}"]}.get(given, [])
        if given == "PET_MASTER_PORT":
            env["PET_MASTER_PORT"] = str(port)
        r = run([binary("ddprun"), *args, "/bin/true"], env=env)
    assert r.returncode == 1
    assert r.stderr.startswith(f"ddprun: error: cannot listen on 127.0.0.1:{port}: "
                               f"the port is in use (pick another port in {given}, ")
    assert len(r.stderr.splitlines()) == 1


def test_a_master_addr_of_another_machine_on_one_node_says_so():
    """It said 'cannot listen on 192.0.2.77:0: Cannot assign requested address'."""
    r = run([binary("ddprun"), "--master-addr", "192.0.2.77", "/bin/true"], env=base_env())
    assert r.returncode == 1
    assert r.stderr == ("ddprun: error: cannot listen on 192.0.2.77: not an address of this "
                        "machine (this node hosts the store: give an address of its own as "
                        "--master-addr, or leave it out)\n"), r.stderr


def test_many_workers_under_a_low_descriptor_limit(tmp_path):
    # 2 pipes per worker exceed a soft limit of 64: ddprun raises its own
    # (up to the hard limit) and hands the workers the limit it was given.
    import resource

    def low_soft_limit():
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))

    r = run([binary("ddprun"), "--nproc-per-node", "48", "sh", "-c", "ulimit -n"],
            env=base_env(), preexec_fn=low_soft_limit)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["64"] * 48


def fake_sysfs(root, gpus, nodes, cpus):
    """A sysfs tree: gpus {pci: numa_node}, nodes {n: [cpu]}, cpus {cpu: (package,
    siblings list, last-level cache list)}; one non-GPU PCI device besides."""
    def put(path, text):
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    for pci, node in gpus.items():
        put(f"/sys/bus/pci/devices/{pci}/vendor", "0x10de")
        put(f"/sys/bus/pci/devices/{pci}/class", "0x030200")
        put(f"/sys/bus/pci/devices/{pci}/numa_node", str(node))
    put("/sys/bus/pci/devices/0000:00:1f.0/vendor", "0x8086")
    put("/sys/bus/pci/devices/0000:00:1f.0/class", "0x030000")
    for n, cl in nodes.items():
        put(f"/sys/devices/system/node/node{n}/cpulist", ",".join(map(str, cl)))
    for c, (pkg, sib, llc) in cpus.items():
        put(f"/sys/devices/system/cpu/cpu{c}/topology/physical_package_id", str(pkg))
        put(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list", sib)
        put(f"/sys/devices/system/cpu/cpu{c}/cache/index0/type", "Instruction")
        put(f"/sys/devices/system/cpu/cpu{c}/cache/index0/level", "4")
        put(f"/sys/devices/system/cpu/cpu{c}/cache/index3/type", "Unified")
        put(f"/sys/devices/system/cpu/cpu{c}/cache/index3/level", "3")
        put(f"/sys/devices/system/cpu/cpu{c}/cache/index3/shared_cpu_list", llc)


def pinned_cpus(tmp_path, mode, root, **env):
    """{rank: Cpus_allowed_list} of two workers under --numa-binding MODE."""
    out = tmp_path / f"out-{mode}-{root.name}-{len(env)}"
    out.mkdir()
    r = run([binary("ddprun"), "--nproc-per-node", "2", "--numa-binding", mode, "sh", "-c",
             f"grep Cpus_allowed_list: /proc/self/status > {out}/$RANK"],
            env=base_env(DDP_SYSFS_ROOT=str(root), **env))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return {int(n): (out / n).read_text().split()[1] for n in os.listdir(out)}


def test_numa_binding_pins_each_worker_near_its_gpu(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to pin two workers apart")
    a, b = cpus[:2]
    both = f"{a},{b}" if b != a + 1 else f"{a}-{b}"
    two_nodes = tmp_path / "two"
    fake_sysfs(two_nodes, {"0000:01:00.0": 0, "0000:81:00.0": 1}, {0: [a], 1: [b]},
               {a: (0, str(a), str(a)), b: (0, str(b), str(b))})
    assert pinned_cpus(tmp_path, "node", two_nodes) == {0: str(a), 1: str(b)}
    # GPU numbers follow CUDA_VISIBLE_DEVICES; both nodes are on socket 0
    assert pinned_cpus(tmp_path, "socket", two_nodes) == {0: both, 1: both}
    assert pinned_cpus(tmp_path, "node", two_nodes, CUDA_VISIBLE_DEVICES="1,0") == \
        {0: str(b), 1: str(a)}
    # one node with both GPUs: its cores (or caches) are shared out
    one_node = tmp_path / "one"
    fake_sysfs(one_node, {"0000:01:00.0": 0, "0000:02:00.0": 0}, {0: [a, b]},
               {a: (0, str(a), str(a)), b: (0, str(b), str(b))})
    assert pinned_cpus(tmp_path, "node", one_node) == {0: both, 1: both}
    assert pinned_cpus(tmp_path, "exclusive", one_node) == {0: str(a), 1: str(b)}
    assert pinned_cpus(tmp_path, "core-complex", one_node) == {0: str(a), 1: str(b)}


def test_numa_binding_without_the_topology_warns_once_and_runs(tmp_path):
    r = run([binary("ddprun"), "--nproc-per-node", "2", "--numa-binding", "node", "/bin/true"],
            env=base_env(DDP_SYSFS_ROOT=str(tmp_path)))
    assert r.returncode == 0
    assert r.stderr == (f"ddprun: warning: --numa-binding node: no NVIDIA GPU in {tmp_path}"
                        "/sys/bus/pci/devices; the workers run unpinned\n")
