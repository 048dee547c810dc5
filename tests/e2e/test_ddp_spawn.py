"""ddp_spawn, C's torch.multiprocessing.spawn: children get a launcher's
environment and a working world; join reports the first failure the way torch
does and stops the others; daemon children die with the parent, others do not;
the spawn start method re-executes the program."""
import os
import re
import signal
import subprocess

import pytest

from conftest import PYTHON, prog, run, wait_for, pid_alive


def env():
    e = dict(os.environ, DDP_QUIET="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        e.pop(k, None)
    return e


@pytest.mark.parametrize("method", [[], ["--spawn-method"]], ids=["fork", "spawn"])
def test_join_runs_every_rank_in_one_world(method):
    r = run([prog("ddp_spawn_prog")] + method + ["4", "ok"], timeout=60, env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    sums = re.findall(r"^\[rank(\d)\] sum 6 \(rank (\d) of 4, pid (\d+)\)$", r.stdout, re.M)
    assert sorted(int(a) for a, b, _ in sums) == [0, 1, 2, 3]
    assert all(a == b for a, b, _ in sums)
    assert len({pid for _, _, pid in sums}) == 4
    assert r.stdout.rstrip().endswith("spawn ok")


def test_children_meet_without_a_store_even_inside_a_launched_job():
    """libddp has no store server to offer: the children get no MASTER_ADDR/PORT
    (not even the parent's, which names its launcher's store) and DDP_STORE=0,
    and form their world through shared memory."""
    from conftest import free_port
    e = dict(env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), DDP_TIMEOUT="5")
    r = run([prog("ddp_spawn_prog"), "3", "ok"], timeout=60, env=e)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "env MASTER_ADDR=(unset) DDP_STORE=0" in r.stdout.splitlines()
    assert r.stdout.rstrip().endswith("spawn ok")


def test_failure_is_reported_and_the_others_stopped():
    r = run([prog("ddp_spawn_prog"), "3", "exit", "1", "5"], timeout=30, env=env())
    assert r.returncode == 1
    assert "spawn failed: ddp_spawn: process 1 terminated with exit code 5" in r.stdout
    assert "failure rank=1 code=5 signal=0" in r.stdout
    # the others slept 30 s: the test's own timeout proves they were stopped


@pytest.mark.parametrize("method", [[], ["--spawn-method"]], ids=["fork", "spawn"])
def test_a_failure_before_every_child_attached_leaves_no_shared_memory(method):
    """Rank 1 fails before its ddp_init; ranks 0 and 2 wait in theirs for it
    and are stopped. Rank 0 had created the node's segment, which goes only
    once every rank attached: it stayed in /dev/shm (9 MiB) after ddp_spawn
    returned (found by a hostile review)."""
    p = subprocess.Popen([prog("ddp_spawn_prog")] + method + ["3", "init", "1", "5"],
                         env=dict(env(), DDP_TIMEOUT="60"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1, out + err
    assert "spawn failed: ddp_spawn: process 1 terminated with exit code 5" in out, out + err
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"ddp-spawn-{p.pid}-")]
    assert left == [], left


def test_a_failed_fork_stops_only_the_children_forked_so_far():
    """fork failing for the third child (RLIMIT_NPROC): ddp_spawn returns the
    error and stops the two it forked. It signalled "pid 0" for the others,
    the caller's whole process group, itself included (killed by SIGTERM)."""
    p = subprocess.Popen([prog("ddp_spawn_prog"), "--forks", "2", "3", "sleep"], env=env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 1, (p.returncode, out, err)
    assert "spawn failed: ddp_spawn: fork: Resource temporarily unavailable" in out

    def group_gone():
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            return True
        return False
    wait_for(group_gone, timeout=10, what="the forked children to be gone")


def test_a_failure_is_seen_with_sigchld_ignored():
    """With SIGCHLD ignored the kernel reaped the children, waitpid failed
    with ECHILD, and that counted as exit status 0: a child returning 3 gave
    "spawn ok". ddp_spawn makes SIGCHLD reapable while its children run,
    and puts the program's disposition back, in the children too."""
    r = run([prog("ddp_spawn_prog"), "--sigchld", "ign", "2", "exit", "1", "3"], timeout=30,
            env=env())
    assert r.returncode == 1, r.stdout + r.stderr
    assert "spawn failed: ddp_spawn: process 1 terminated with exit code 3" in r.stdout
    assert "failure rank=1 code=3 signal=0" in r.stdout
    assert "sigchld after ign" in r.stdout
    r = run([prog("ddp_spawn_prog"), "--sigchld", "ign", "2", "quick", "0"], timeout=30,
            env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sigchld child ign" in r.stderr and "sigchld after ign" in r.stdout


@pytest.mark.parametrize("code", [0, 3])
def test_a_ddp_spawn_inside_a_spawned_child_sees_its_childs_status(code):
    """SIGCHLD ignored, and a spawned child runs a ddp_spawn of its own: the
    child inherited the parent's hold (it counted itself a later holder) and
    left SIGCHLD ignored, so the kernel reaped its children: a success was
    "a status that is unknown", and exit code 3 was lost."""
    r = run([prog("ddp_spawn_prog"), "--sigchld", "ign", "1", "nested", str(code)],
            timeout=30, env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    want = ("nested rc 0: ok" if code == 0 else
            "ddp_spawn: process 0 terminated with exit code 3")
    assert want in r.stderr, r.stderr


def test_a_status_the_programs_own_reaper_took_is_not_a_success():
    """A SIGCHLD handler that reaps with waitpid(-1) takes the statuses first:
    that counted as exit status 0 ("spawn ok" for a child that returned 3).
    Whichever waitpid wins, ddp_spawn fails: with the status, or saying it
    is unknown."""
    r = run([prog("ddp_spawn_prog"), "--sigchld", "reaper", "2", "quick", "3"], timeout=30,
            env=env())
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("terminated with exit code 3" in r.stdout
            or "exited with a status that is unknown: another waitpid in this program "
               "(a SIGCHLD handler?) reaped it first" in r.stdout), r.stdout


def test_a_signal_is_reported_by_name():
    r = run([prog("ddp_spawn_prog"), "2", "signal", "0"], timeout=30, env=env())
    assert r.returncode == 1
    assert "process 0 terminated with signal SIGKILL" in r.stdout
    assert "failure rank=0 code=-1 signal=9" in r.stdout


def _children(p, n):
    pids = []
    while len(pids) < n:
        line = p.stdout.readline()
        assert line, "spawn_prog ended early"
        m = re.match(r"child \d+ pid (\d+)", line)
        if m:
            pids.append(int(m.group(1)))
    return pids


def test_daemon_children_die_with_the_parent(reaper):
    p = reaper.popen([prog("ddp_spawn_prog"), "--daemon", "--no-join", "2", "sleep"],
                     stdout=subprocess.PIPE, text=True, env=env())
    pids = _children(p, 2)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    for pid in pids:
        wait_for(lambda: not pid_alive(pid), timeout=10, what=f"daemon child {pid} to die")


def test_non_daemon_children_outlive_the_parent(reaper):
    p = reaper.popen([prog("ddp_spawn_prog"), "--no-join", "2", "sleep"],
                     stdout=subprocess.PIPE, text=True, env=env())
    pids = _children(p, 2)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    try:
        assert all(pid_alive(pid) for pid in pids)
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


DUMP_ENV = ("import os; open(os.path.join(os.environ['ENV_DUMP_DIR'], 'env.' + os.environ['RANK']),"
            " 'w').write(''.join(f'{k}={v}\\n' for k, v in os.environ.items()))")


def dump_envs(d):
    """{rank: {name: value}} from the env.RANK files in d, which are removed."""
    out = {}
    for name in os.listdir(d):
        if not name.startswith("env."):
            continue  # the test's $TMPDIR (conftest.private_tmpdir)
        with open(d / name) as f:
            out[int(name[4:])] = dict(line.rstrip("\n").split("=", 1)
                                      for line in f if "=" in line)
        os.unlink(d / name)
    return out


def test_children_get_the_same_contract_as_ddpruns_workers(tmp_path):
    """One builder (rendezvous/workenv.c) for both spawners: for the same job (3
    workers on one node) ddp_spawn's children and ddprun's workers get the same
    environment but for what names the launcher's own instance: its store
    (MASTER_*, TORCHELASTIC_USE_AGENT_STORE; ddp_spawn has none: DDP_STORE=0),
    its run id, per-worker error files, shared-memory nonce, hang watch
    (ddprun(1) --hang-timeout) and forwarded signals (ddp_spawn forwards
    none), ddp_spawn's DDP_PDEATHSIG."""
    from conftest import binary
    instance = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "DDP_STORE",
                "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "DDP_SHM_NONCE",
                "DDP_PROGRESS_FILE", "TORCHELASTIC_TIMER_FILE", "PYTHONFAULTHANDLER",
                "TORCHELASTIC_SIGNALS_TO_HANDLE", "DDP_PDEATHSIG"}
    e = dict(env(), TORCHELASTIC_ERROR_FILE="/nonexistent/parent.json")
    e.pop("OMP_NUM_THREADS", None)
    e.pop("TORCH_NCCL_ASYNC_ERROR_HANDLING", None)
    e.pop("NCCL_ASYNC_ERROR_HANDLING", None)
    e["ENV_DUMP_DIR"] = str(tmp_path)
    r = run([prog("ddp_spawn_prog"), "3", "env"], timeout=60, env=e)
    assert r.returncode == 0, r.stdout + r.stderr
    spawned = dump_envs(tmp_path)
    r = run([binary("ddprun"), "--nproc-per-node", "3", PYTHON, "-c", DUMP_ENV], timeout=60,
            env=e)
    assert r.returncode == 0, r.stdout + r.stderr
    launched = dump_envs(tmp_path)
    assert sorted(spawned) == sorted(launched) == [0, 1, 2]
    for rank in range(3):
        s, l = spawned[rank], launched[rank]
        assert {k: v for k, v in s.items() if k not in instance} == \
            {k: v for k, v in l.items() if k not in instance}, rank
        assert s["RANK"] == s["LOCAL_RANK"] == str(rank)
        assert s["OMP_NUM_THREADS"] == s["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert s["NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert "MASTER_ADDR" not in s and s["DDP_STORE"] == "0"
        assert s["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert l["MASTER_ADDR"] and l["TORCHELASTIC_ERROR_FILE"] != e["TORCHELASTIC_ERROR_FILE"]
        # ddp_spawn passes on what a launcher above it gave the parent.
        assert s["TORCHELASTIC_ERROR_FILE"] == e["TORCHELASTIC_ERROR_FILE"]
