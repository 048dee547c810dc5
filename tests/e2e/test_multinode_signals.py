"""--forward-signals across nodes: a signal that reaches one node's ddprun
(kill, sbatch --signal=B:USR1) reaches every worker on every node once, and
one that reaches every node's ddprun at once (scancel --signal, sbatch
--signal=USR1@T) reaches every worker once too, not once per node. The job
goes on and ends with 0. Two agents on loopback, two workers each. And a
stop signal Slurm repeats once a node's workers have exited does not hurry
that node out of the job."""
import os
import signal
import sys

import pytest

from mnutil import Agent, clean_env, free_port, node_args, static_job, wait_for, wait_stderr

CKPT_WORKER = os.path.join(os.path.dirname(__file__), "ckpt_worker.py")
SCRIPT = f'exec "{sys.executable}" "{CKPT_WORKER}" "$OUT"'
NPROC = [2, 2]
WORLD = sum(NPROC)


def got(out, rank):
    f = out / f"got.{rank}"
    return f.read_text().split() if f.exists() else []


def wait_got(out, names):
    """Until every worker got exactly names, in any order: a signal that
    comes while a Python handler runs has its handler run inside it."""
    wait_for(lambda: all(sorted(got(out, r)) == sorted(names) for r in range(WORLD)),
             timeout=30, what=f"every worker to get {names}")


def job(reaper, tmp_path):
    agents, out, _ = static_job(reaper, tmp_path, NPROC, SCRIPT,
                                extra=("--forward-signals", "SIGUSR1,SIGUSR2"))
    wait_for(lambda: all((out / f"ready.{r}").exists() for r in range(WORLD))
             or any(a.p.poll() is not None for a in agents), timeout=60,
             what="every worker ready")
    assert all(a.p.poll() is None for a in agents), [a.stderr() for a in agents]
    return agents, out


def end(agents, out):
    (out / "stop").touch()
    for a in agents:
        assert a.wait(timeout=60) == 0, a.stderr()


def test_usr1_to_node_0_reaches_every_worker_of_both_nodes_once(reaper, tmp_path):
    agents, out = job(reaper, tmp_path)
    agents[0].signal(signal.SIGUSR1)
    wait_got(out, ["SIGUSR1"])
    # A fence: node 1's USR2 comes after any (wrong) second USR1 in every
    # node's order of deliveries.
    agents[1].signal(signal.SIGUSR2)
    wait_got(out, ["SIGUSR1", "SIGUSR2"])
    end(agents, out)
    for r in range(WORLD):
        assert sorted(got(out, r)) == ["SIGUSR1", "SIGUSR2"]
        assert (out / f"ckpt.{r}.1").exists() and not (out / f"ckpt.{r}.2").exists()
    assert "SIGUSR1: forwarded to 2 workers" in agents[0].stderr()
    assert "SIGUSR1 from node 0: forwarded to 2 workers" in agents[1].stderr()
    assert "SIGUSR2 from node 1: forwarded to 2 workers" in agents[0].stderr()


def test_usr1_to_every_node_at_once_reaches_every_worker_once(reaper, tmp_path):
    # As scancel --signal=USR1 does: each node's ddprun gets it.
    agents, out = job(reaper, tmp_path)
    for a in agents:
        a.signal(signal.SIGUSR1)
    # Once each node has taken its USR1 (sent on, or merged with the other
    # node's), node 1's USR2 is a fence as above.
    for a in agents:
        wait_stderr(a, "SIGUSR1: ")
    agents[1].signal(signal.SIGUSR2)
    wait_got(out, ["SIGUSR1", "SIGUSR2"])
    end(agents, out)
    for r in range(WORLD):
        assert sorted(got(out, r)) == ["SIGUSR1", "SIGUSR2"]


def test_after_a_restart_the_next_round_forwards_too(reaper, tmp_path):
    # Round 0: rank 0 fails at once; round 1 runs the checkpointing workers
    # (in out/r1), and a USR1 to node 1 reaches all of them once.
    script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then [ "$RANK" = 0 ] && exit 3; '
              'exec sleep 1000; fi; mkdir -p "$OUT/r1"; OUT="$OUT/r1"; ' + SCRIPT)
    agents, out, _ = static_job(reaper, tmp_path, NPROC, script,
                                extra=("--forward-signals", "SIGUSR1,SIGUSR2",
                                       "--max-restarts", "1"))
    out = out / "r1"
    wait_for(lambda: all((out / f"ready.{r}").exists() for r in range(WORLD))
             or any(a.p.poll() is not None for a in agents), timeout=60,
             what="every worker of round 1 ready")
    assert all(a.p.poll() is None for a in agents), [a.stderr() for a in agents]
    agents[1].signal(signal.SIGUSR1)
    wait_got(out, ["SIGUSR1"])
    agents[0].signal(signal.SIGUSR2)
    wait_got(out, ["SIGUSR1", "SIGUSR2"])
    end(agents, out)
    for r in range(WORLD):
        assert sorted(got(out, r)) == ["SIGUSR1", "SIGUSR2"]


# ---- a stop signal Slurm repeats after a node's workers exited ------------------------

FAKE_STEPD = os.path.join(os.path.dirname(__file__), "fake_slurmstepd.py")
TERM_WORKER = os.path.join(os.path.dirname(__file__), "term_worker.py")


# Workers that end at once on node 0 (RANK 0): after SIGTERM (term_worker.py
# --linger 0), or by themselves as soon as they started ("exited"); node 1's
# takes SIGTERM and 4 s to save its checkpoint. Node 0's is ready (and gets
# the stop) only once node 1's blocks the stop signals: under load node 1's
# Python was still starting, and died of the SIGTERM at once.
AFTER_1 = ('[ "$RANK" = 0 ] && { i=0; while [ ! -e "$OUT/ready.1" ] && [ $i -lt 1500 ]; do '
           'sleep 0.02; i=$((i+1)); done; }; ')
EARLY = ('[ "$RANK" = 0 ] && { echo $$ > "$OUT/.ready.0"; mv "$OUT/.ready.0" "$OUT/ready.0"; '
         'exit 0; }; ')
LINGER = '[ "$RANK" = 0 ] && L=0 || L=4; exec "{}" "{}" "$OUT" --linger $L'


@pytest.mark.parametrize("proctrack", ["proctrack/cgroup", "proctrack/linuxproc"])
@pytest.mark.parametrize("when", ["stopping", "exited"])
def test_slurms_repeat_after_a_nodes_workers_exited_does_not_hurry_it(reaper, tmp_path,
                                                                      when, proctrack):
    # scancel, or the time limit: node 0's slurmstepd sends SIGTERM (while
    # its worker runs, or once it has ended and node 0 waits for node 1's),
    # and sends it again once node 0's worker has exited. The repeat is no
    # further signal: node 0, the store's host, still waits for node 1 to
    # stop its worker and leave. It took it for one and closed the store
    # at once, and node 1 lost it in the middle of its stop.
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    script = AFTER_1 + (EARLY if when == "exited" else "") + LINGER.format(sys.executable,
                                                                         TERM_WORKER)
    env = clean_env(OUT=str(out), FAKE_STEPD_TIMES="2", FAKE_STEPD_NODE="0/2",
                    FAKE_STEPD_AFTER_EXIT="1" if when == "exited" else "2")
    stepd = [sys.executable, FAKE_STEPD, str(out), "1", str(int(signal.SIGTERM)), proctrack]
    # (node 1's 4 s to stop, well within its shutdown timeout)
    agents = [Agent(reaper, tmp_path, f"node{r}",
                    node_args(2, r, port, 1, script, extra=("--shutdown-timeout", "10")),
                    env=env, prefix=stepd if r == 0 else ()) for r in (0, 1)]
    assert agents[1].wait(timeout=60) == 143, agents[1].stderr()
    assert agents[0].wait(timeout=60) == 143, agents[0].stderr()
    err0, err1 = agents[0].stderr(), agents[1].stderr()
    assert "node 0 (host" in err1 and "received SIGTERM" in err1, err1
    assert "lost the rendezvous store" not in err1, err1
    assert (out / "done.1").exists(), err1  # its checkpoint's 4 s, not killed
    assert "received SIGTERM from Slurm again" in err0, err0
