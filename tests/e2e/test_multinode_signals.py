"""--forward-signals across nodes: a signal that reaches one node's ddprun
(kill, sbatch --signal=B:USR1) reaches every worker on every node once, and
one that reaches every node's ddprun at once (scancel --signal, sbatch
--signal=USR1@T) reaches every worker once too, not once per node. The job
goes on and ends with 0. Two agents on loopback, two workers each."""
import os
import signal
import sys

from mnutil import static_job, wait_for, wait_stderr

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
