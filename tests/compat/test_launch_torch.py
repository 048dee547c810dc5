"""Real PyTorch (CPU, gloo; each version torchroot.py finds: host 1.13, trixie
2.6, sid's newest) under ddprun: scripts written for torchrun run unmodified,
restarts form a new group on the same store, and @record tracebacks reach the
report. For 2.x the workers run with the use_libuv default fix (nolibuv/):
init_process_group("env://") on ddprun's agent store fails without it on
Debian's libuv-less build, exactly as it does under Debian's torchrun."""
import os
import re
import subprocess
import textwrap

import pytest

from conftest import may_trace_any

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DDP_BUILD", os.path.join(REPO, "build"))
DDPRUN = os.path.join(BUILD, "bin", "ddprun")

TRAIN = textwrap.dedent("""
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main():
        # env:// from ddprun's variables, on the store ddprun hosts
        assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        dist.init_process_group("gloo")
        if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) < int(os.environ.get("FAIL_ATTEMPTS", 0)):
            dist.barrier()
            if dist.get_rank() == 1:
                raise SystemExit(5)  # fail after the group formed: the next try reuses the store
            import time
            time.sleep(60)
        rank, world = dist.get_rank(), dist.get_world_size()
        assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                        torch.nn.Linear(16, 1)))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(100 + rank)  # different data per rank
        for _ in range(20):
            x = torch.randn(32, 8, generator=g)
            y = x.sum(dim=1, keepdim=True)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        every = [torch.zeros_like(flat) for _ in range(world)]
        dist.all_gather(every, flat)
        agree = all(torch.equal(every[0], t) for t in every)
        print(f"rank {rank}/{world} agree={agree} sum={flat.sum().item():.6f}", flush=True)
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
""")

RAISES = textwrap.dedent("""
    import os
    from torch.distributed.elastic.multiprocessing.errors import record

    def inner():
        raise ValueError("rank " + os.environ["RANK"] + " lost its data")

    @record
    def main():
        if os.environ["RANK"] == "1":
            inner()
        import time
        time.sleep(60)

    if __name__ == "__main__":
        main()
""")


def ddprun(pt, tmp_path, *args, timeout=180, **extra):
    """ddprun ARGS with pt's Python as the workers' interpreter."""
    env = pt.env(PYTHON_EXEC=pt.python, **extra)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE"):
        env.pop(k, None)
    return subprocess.run([DDPRUN, *args], cwd=tmp_path, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ddp_training_with_gloo_on_four_workers_agrees(pt, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    r = ddprun(pt, tmp_path, "--nproc-per-node=4", "train.py")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("rank "))
    assert [l.split()[1] for l in lines] == ["0/4", "1/4", "2/4", "3/4"]
    assert all("agree=True" in l for l in lines), lines
    assert len({l.split("sum=")[1] for l in lines}) == 1, lines


def test_restart_forms_a_new_group_on_the_same_store(pt, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    r = ddprun(pt, tmp_path, "--nproc-per-node=3", "--max-restarts=1", "--shutdown-timeout=10",
               "train.py", FAIL_ATTEMPTS="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "restart 1 of 1" in r.stderr
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("rank "))
    assert len(lines) == 3 and all("agree=True" in l for l in lines), lines


def test_record_exception_and_traceback_appear_in_the_report(pt, tmp_path):
    (tmp_path / "fails.py").write_text(RAISES)
    r = ddprun(pt, tmp_path, "--nproc-per-node=2", "--shutdown-timeout=5", "--log-dir=logs",
               "fails.py")
    assert r.returncode == 1, r.stderr[-3000:]
    err = r.stderr
    assert "fails.py FAILED" in err
    root = err.split("Root Cause (first observed failure):")[1]
    assert re.search(r"rank      : 1 \(local_rank: 1\)", root)
    assert re.search(r"error_file: /\S+/attempt_0/1/error\.json", root)
    assert "traceback : Traceback (most recent call last):" in root
    assert 'in inner\n      raise ValueError("rank " + os.environ["RANK"] + " lost its data")' in root
    assert "  ValueError: rank 1 lost its data" in root


STUCK_LOADER = textwrap.dedent("""
    import os, time
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset

    def stuck_in_getitem():
        while True:
            time.sleep(100)

    class Data(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            if i == 21 and os.environ["RANK"] == "1":  # (workers may be spawned)
                stuck_in_getitem()
            return torch.tensor([float(i)])

    if __name__ == "__main__":
        dist.init_process_group("gloo")
        for b in DataLoader(Data(), batch_size=4, num_workers=2):
            pass
        dist.barrier()
""")


def test_a_dataloader_worker_stuck_in_getitem_prints_its_stack(pt, tmp_path, short_tmpdir):
    """Rank 1's DataLoader worker never returns from __getitem__; rank 1
    waits for it, rank 0 in a barrier. The dump named only the ranks: the
    worker's stack, where the job hung, was never printed. Now each rank's
    processes print theirs (held stopped until their turn), and rank 1's own
    stack is still the DataLoader's wait, not its reaction to its worker's
    death."""
    (tmp_path / "stuck.py").write_text(STUCK_LOADER)
    r = ddprun(pt, tmp_path, "--nproc-per-node=2", "--hang-timeout=4", "--shutdown-timeout=5",
               "stuck.py")  # (short_tmpdir: the batches go through a Unix socket)
    assert r.returncode == 124, r.stderr[-3000:]
    err = r.stderr
    assert re.search(r"^  its process \d+ .*child of \d+: state", err, re.M), err[-3000:]
    assert re.search(r'^\[rank1\]: +File ".*stuck\.py", line \d+ in stuck_in_getitem', err,
                     re.M), err[-6000:]
    assert re.search(r"^\[rank1\]: +File .*dataloader\.py.* in _try_get_data", err, re.M), \
        err[-6000:]
    assert "exited unexpectedly" not in err, err[-6000:]
    # Where they are in torch.distributed, from their native stacks: rank 1
    # in its own code (waiting for its DataLoader), rank 0 in the barrier.
    _, root = waited_for(err, verdict(err), 1, "0")
    assert "traceback : Hang: the rank was in its own code, in no torch.distributed " \
        "collective, while other ranks waited in torch.distributed; ddprun sent SIGABRT to the " \
        "rank's Python processes: " in root, root


def verdict(err):
    """The job's verdict: the lines after "ddprun: the job hung: ...", up to
    the rule that ends them, each after a newline."""
    assert "ddprun: the job hung: " in err, err[-3000:]
    v = err.split("ddprun: the job hung: ", 1)[1].split("\n=====", 1)[0]
    return v[v.find("\n"):] + "\n" if "\n" in v else "\n"


def hung(pt, tmp_path, script, nproc=2, wrapped=False):
    """script on nproc ranks with a short --hang-timeout, which must find
    it hung (124): (ddprun's stderr, the verdict). 2 s: no rank of these
    scripts is quiet that long before it is where it hangs (a rank that
    imports torch or joins uses CPU, progress), and each run is 2 s sooner.
    wrapped: each rank is a shell script that runs it (not by exec), rank
    1's through a Python launcher (as conda run is), and the program starts
    a Python helper that imports torch (as inductor's compile workers do)."""
    if wrapped:
        script = HELPER + script
    (tmp_path / "job.py").write_text(script)
    prog = ["job.py"]
    if wrapped:
        (tmp_path / "launch.py").write_text(
            "import subprocess, sys\nsys.exit(subprocess.call([sys.executable, 'job.py']))\n")
        (tmp_path / "wrap.sh").write_text(
            f"#!/bin/sh\nif [ \"$LOCAL_RANK\" = 1 ]; then {pt.python} launch.py; "
            f"else {pt.python} job.py; fi\ns=$?\necho ended $s\nexit $s\n")
        (tmp_path / "wrap.sh").chmod(0o755)
        prog = ["--no-python", "./wrap.sh"]
    r = ddprun(pt, tmp_path, f"--nproc-per-node={nproc}", "--hang-timeout=2",
               "--shutdown-timeout=5", *prog)
    assert r.returncode == 124, r.stderr[-3000:]
    return r.stderr, verdict(r.stderr)


# A Python helper with torch, the program's child (not multiprocessing's).
HELPER = textwrap.dedent("""
    import subprocess, sys
    helper = subprocess.Popen([sys.executable, "-c", "import torch, sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE)
""")


def failures(err):
    """The report's other failures and its root cause, each an entry's text."""
    head, root = err.split("Root Cause (first observed failure):", 1)
    others = head.rsplit("Failures:", 1)[1]
    return re.split(r"^\[\d+\]:\n", others, flags=re.M)[1:], root.split("\n=====", 1)[0]


def waited_for(err, v, culprit, waiters):
    """The verdict names rank culprit (of one node: its local rank too) in
    its own code as the one the waiters (a rank list as the verdict writes
    it) wait for in a collective, and the summary's root cause is culprit:
    (the other failures' entries, the root cause's)."""
    one = waiters.isdigit()
    assert f"\n  rank {culprit} is in its own code, in no torch.distributed collective (see its " \
        "stack): the others wait for it\n" in v, v
    assert f"\n  {'rank' if one else 'ranks'} {waiters} {'waits' if one else 'wait'} in a " \
        "torch.distributed collective or send/recv (a wait of c10d's in " \
        f"{'its stack' if one else 'their stacks'})\n" in v, v
    others, root = failures(err)
    assert re.search(rf"^  rank      : {culprit} \(local_rank: {culprit}\)$", root, re.M), root
    return others, root


def entry(entries, rank):
    """The report entry of rank (its lines)."""
    found = [e for e in entries if re.search(rf"^  rank      : {rank} \(", e, re.M)]
    assert len(found) == 1, entries
    return found[0]


OWN_CODE = textwrap.dedent("""
    import os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    if dist.get_rank() == 1:
        time.sleep(600)  # in its own code, the group formed
    dist.all_reduce(torch.ones(1))
""")


def test_a_hang_names_the_rank_in_its_own_code_that_the_others_wait_for(pt, tmp_path):
    """PyTorch's ranks report no collectives (no libddp): the verdict said
    only that. Now their native stacks place them: rank 1 sleeps in its own
    code with its gloo group formed, rank 0 waits in its all_reduce; and the
    report's root cause is rank 1 (its error file has no caused_by), not
    rank 0, a victim that happened to be first."""
    err, v = hung(pt, tmp_path, OWN_CODE)
    own_code_named(err, v, "")


@pytest.mark.torch_ends
def test_a_hang_places_the_ranks_of_a_wrapper_script_by_its_python_program(pt, tmp_path):
    """Each rank is a shell script that runs the Python program (as a
    cluster's job script does), rank 1's through a Python launcher: their
    native stacks were the shell's, a wait for its child, and neither rank
    was placed. Now the one process with torch that a rank runs stands for
    it: the same verdict and root cause as the bare program's (not its
    helper's, nor its launcher's); and rank 1's program, under its
    launcher, prints its Python stack too (only the launcher did)."""
    if not may_trace_any():
        pytest.skip("Yama's ptrace_scope: ddprun may trace only the workers, not their children")
    err, v = hung(pt, tmp_path, OWN_CODE, wrapped=True)
    assert err.count(", the Python program the rank runs and waits for):\n") == 2, err[-6000:]
    own_code_named(err, v, " to the rank's Python processes")  # (not to the shell)
    assert re.search(r'^\[rank1\]: +File ".*job\.py", line \d+ in <module>', err, re.M), \
        err[-6000:]


def test_a_rank_running_two_programs_at_once_shows_its_own_stack(tmp_path):
    """A wrapper running two programs side by side has no one place: its
    own native stack is shown, and no program stands for it."""
    sleeper = "/usr/bin/python3 -c 'import time; time.sleep(600)'"
    r = subprocess.run([DDPRUN, "--nproc-per-node", "1", "--hang-timeout", "2", "--no-python",
                        "sh", "-c", f"{sleeper} & {sleeper}; wait"], cwd=tmp_path, timeout=180,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 124, r.stderr[-3000:]
    pid = re.search(r"^ddprun: rank 0 \(local rank 0\): pid (\d+)", r.stderr, re.M)[1]
    assert len(re.findall(r"^  its process \d+ \(python", r.stderr, re.M)) == 2, r.stderr
    assert f"  native stack (eu-stack -p {pid}):\n" in r.stderr, r.stderr
    assert "the rank runs and waits for" not in r.stderr, r.stderr


def own_code_named(err, v, sent_to):
    """OWN_CODE's verdict and summary: rank 1 is the one the others wait
    for; sent_to: what the summary says SIGABRT was sent to."""
    others, root = waited_for(err, v, 1, "0")
    assert "every rank" not in v and "no rank" not in v, v
    assert "caused_by" not in root and "note      :" not in root, root
    assert re.search(r"^  traceback : Hang: the rank was in its own code, in no torch.distributed "
                     r"collective, while other ranks waited in torch.distributed; ddprun sent "
                     rf"SIGABRT{sent_to}: no rank made progress", root, re.M), root
    assert "caused_by : the hang (--hang-timeout)\n" in entry(others, 0), others
    assert f"traceback : Hang: ddprun sent SIGABRT{sent_to}: " in entry(others, 0), others


NO_GROUP = textwrap.dedent("""
    import os, time
    import torch
    import torch.distributed as dist

    if os.environ["RANK"] == "1":
        time.sleep(600)  # before its init_process_group: rank 0 waits for it to join
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
""")


@pytest.mark.torch_ends
def test_a_hang_names_the_rank_that_never_joined_the_process_group(pt, tmp_path):
    """Rank 1 never calls init_process_group; rank 0 waits in its join, on
    the store. The verdict names rank 1 as the one without a group, rank 0
    as waiting on the store, and the root cause is rank 1."""
    err, v = hung(pt, tmp_path, NO_GROUP)
    assert "\n  rank 1 has not formed its process group (no torch.distributed in its stack): " \
        "the others wait for it\n" in v, v
    assert "\n  rank 0 waits on the store (joining the process group in init_process_group, " \
        "or a key of the program's)\n" in v, v
    others, root = failures(err)
    assert re.search(r"^  rank      : 1 \(local_rank: 1\)$", root, re.M), root
    assert "caused_by" not in root, root
    assert re.search(r"^  traceback : Hang: the rank had not formed its process group while "
                     r"other ranks waited in torch.distributed; ddprun sent SIGABRT: ", root,
                     re.M), root
    assert "caused_by : the hang (--hang-timeout)\n" in entry(others, 0), others


EVERY_RANK_WAITS = textwrap.dedent("""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # Each rank all_reduces on a pair it shares with the next: a cycle in
    # which every rank waits in a collective for one that waits in another.
    pairs = [dist.new_group([0, 1]), dist.new_group([1, 2]), dist.new_group([0, 2])]
    dist.all_reduce(torch.ones(1))
    dist.all_reduce(torch.ones(1), group=pairs[rank])
""")


@pytest.mark.torch_ends
def test_a_hang_where_every_rank_waits_in_a_collective_blames_none(pt, tmp_path):
    """Every rank waits in a collective (in different groups): the verdict
    says the hang is among them, and no error file is marked the cause, so
    the report's root cause, first only by the clock, says so."""
    err, v = hung(pt, tmp_path, EVERY_RANK_WAITS, nproc=3)
    assert "\n  ranks 0-2 wait in a torch.distributed collective or send/recv " \
        "(a wait of c10d's in their stacks)\n" in v, v
    assert "\n  every rank waits in a torch.distributed collective: the hang is among them " in v, v
    assert "is in its own code" not in v and "are in their own code" not in v, v
    assert "not formed" not in v, v
    others, root = failures(err)
    assert len(others) == 2, others
    assert all("caused_by : the hang (--hang-timeout)\n" in e for e in others), others
    assert "caused_by : the hang (--hang-timeout)\n" in root, root
    assert "  note      : ddprun stopped this rank for the hang: it is first only by\n" \
        "              the clock (the hang's verdict says which rank, if any,\n" \
        "              the others waited for)\n" in root, root
    assert "the rank was in its own code" not in err, err[-3000:]


RECV = textwrap.dedent("""
    import time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    if dist.get_rank() == 2:
        time.sleep(600)  # in its own code, the group formed
    dist.recv(torch.zeros(1), src=2)  # gloo's RecvWork::wait
""")


@pytest.mark.torch_ends
def test_a_hang_places_ranks_blocked_in_recv_as_waiting(pt, tmp_path):
    """gloo's recv waits in RecvWork::wait, an override of Work::wait: ranks
    0-1 blocked in dist.recv from rank 2 were placed "in their own code",
    and rank 2, which sleeps, was not the only one named (found by the
    tests' own review)."""
    err, v = hung(pt, tmp_path, RECV, nproc=3)
    waited_for(err, v, 2, "0-1")


DDP_STEP = textwrap.dedent("""
    import time
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(8, 1))
    for step in range(5):
        if step == 2 and dist.get_rank() == 1:
            time.sleep(600)  # its next batch never comes
        model(torch.randn(4, 8)).sum().backward()
""")


@pytest.mark.torch_ends
def test_a_hang_places_ddps_backward_as_waiting(pt, tmp_path):
    """DistributedDataParallel's backward waits for its buckets' all_reduce
    in Reducer::finalize_backward (a future's wait, inlined: no Work::wait):
    rank 0 there was placed "in its own code" like rank 1, which sleeps
    before its backward, and the verdict said the hang was in the
    program's own code (found by a hostile review)."""
    err, v = hung(pt, tmp_path, DDP_STEP)
    waited_for(err, v, 1, "0")


SIDE_THREAD = textwrap.dedent("""
    import threading, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    side = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(1))
    if dist.get_rank() == 1:
        # a thread of its own waits in a collective; the main thread sleeps
        threading.Thread(target=lambda: dist.all_reduce(torch.ones(1), group=side),
                         daemon=True).start()
        time.sleep(600)
    dist.barrier()
""")


@pytest.mark.torch_ends
def test_a_hang_places_a_rank_by_its_main_thread(pt, tmp_path):
    """Rank 1's main thread sleeps while a thread of its own waits in a
    collective; rank 0 waits in the barrier. Any thread's wait placed the
    whole rank: "every rank waits in a torch.distributed collective ... not
    in one rank's own code", which was false (found by a hostile review).
    Now rank 1 is said to be both, and nothing is concluded over every
    rank."""
    err, v = hung(pt, tmp_path, SIDE_THREAD)
    assert "\n  rank 1: its main thread is in its own code, another of its threads waits in " \
        "torch.distributed (see its stack)\n" in v, v
    assert "\n  rank 0 waits in a torch.distributed collective or send/recv " \
        "(a wait of c10d's in its stack)\n" in v, v
    assert "every rank" not in v and "no rank" not in v, v
