"""ddp_spawn, C's torch.multiprocessing.spawn: children get a launcher's
environment and a working world; join reports the first failure the way torch
does and stops the others; daemon children die with the parent, others do not;
the spawn start method re-executes the program."""
import os
import re
import signal
import subprocess

import pytest

from conftest import prog, run, wait_for, pid_alive


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
    assert "spawn failed: process 1 terminated with exit code 5" in r.stdout
    assert "failure rank=1 code=5 signal=0" in r.stdout
    # the others slept 30 s: the test's own timeout proves they were stopped


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
