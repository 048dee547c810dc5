"""bench/multinode harness: N launchers on loopback, one worker each.

  rdzv  LAUNCHER N REPS   -> median ms from starting the first launcher to the
                             last worker's start (every worker writes its
                             start time), i.e. rendezvous plus spawn
  stop  LAUNCHER N T      -> ms from the failing worker's exit (the last
                             node's, once every worker runs) to the exit of
                             the last launcher; "did not stop within T s"
LAUNCHER: ddprun (static), ddprun-c10d, torchrun (static; through
bench/launch/torchrun_fixed.py), torchrun2 (PyTorch 2.x's, static, in the root
that bench/torch2/in-root runs), floor (the N workers started directly).
Prints one line: the figure or the reason.
Environment: DDPRUN (path), TORCH2_ROOT (for torchrun2)."""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
TORCHRUN = [PY, os.path.join(HERE, "..", "launch", "torchrun_fixed.py")]
TORCHRUN2 = [os.path.join(HERE, "..", "torch2", "in-root"), "torchrun"]
# Work directories under /tmp, which in-root binds into the 2.x root.
TMP = "/tmp"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(launcher, n, i, port, script):
    if launcher == "floor":  # the worker alone: what starting N processes costs
        return ["env", f"RANK={i}", "sh", "-c", script]
    if launcher in ("torchrun", "torchrun2"):
        return [*(TORCHRUN if launcher == "torchrun" else TORCHRUN2), "--nnodes", str(n), "--node_rank", str(i), "--master_addr",
                "127.0.0.1", "--master_port", str(port), "--nproc_per_node", "1",
                "--max_restarts", "0", "--no_python", "sh", "-c", script]
    ddprun = os.environ["DDPRUN"]
    if launcher == "ddprun-c10d":
        return [ddprun, "--nnodes", str(n), "--rdzv-backend", "c10d", "--rdzv-endpoint",
                f"127.0.0.1:{port}", "--rdzv-id", "bench", "--nproc-per-node", "1",
                "sh", "-c", script]
    return [ddprun, "--nnodes", str(n), "--node-rank", str(i), "--master-addr", "127.0.0.1",
            "--master-port", str(port), "--nproc-per-node", "1", "sh", "-c", script]


def launch(launcher, n, script, out):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SLURM_"))}
    env.update(OUT=out, TMPDIR=out, N=str(n))
    procs, ends = [], [None] * n
    t0 = time.time()
    for i in range(n):
        procs.append(subprocess.Popen(command(launcher, n, i, port, script), env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))

    def waiter(k):
        procs[k].wait()
        ends[k] = time.time()

    threads = [threading.Thread(target=waiter, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    return t0, procs, threads, ends


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
        p.wait()


def started(out):
    return [float(open(os.path.join(out, f)).read()) for f in os.listdir(out)
            if f.startswith("start.")]


# Each worker writes its start time (whole files only).
STAMP = ('date +%s.%N > "$OUT/.s.$RANK" && mv "$OUT/.s.$RANK" "$OUT/start.$RANK"; ')


def kill_sleepers(out):
    """Kills the workers that `stop` left asleep (their pids are in pid.*):
    torchrun 2.x starts each worker in its own session, so killing the
    launchers' process groups does not reach them."""
    for f in os.listdir(out):
        if not f.startswith("pid."):
            continue
        try:
            pid = int(open(os.path.join(out, f)).read())
            with open(f"/proc/{pid}/cmdline", "rb") as c:
                if c.read().split(b"\0")[0] != b"sleep":
                    continue  # gone, and its pid taken by another
            os.kill(pid, 9)
        except (ValueError, OSError):
            pass


def rdzv(launcher, n, reps):
    figures = []
    for _ in range(reps):
        out = tempfile.mkdtemp(prefix="mnbench.", dir=TMP)
        try:
            t0, procs, threads, _ = launch(launcher, n, STAMP, out)
            for t in threads:
                t.join(timeout=600)
            kill_all(procs)
            if any(p.returncode != 0 for p in procs):
                return f"failed (exit {sorted({p.returncode for p in procs})})"
            s = started(out)
            if len(s) != n:
                return f"failed ({len(s)} of {n} workers started)"
            figures.append((max(s) - t0) * 1000)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return f"{statistics.median(figures):.0f}"


def stop(launcher, n, limit):
    out = tempfile.mkdtemp(prefix="mnbench.", dir=TMP)
    # The worker's pid, for kill_sleepers: not `$$`, which torchrun turns
    # into `$` (its arguments go through string.Template).
    script = (STAMP + 'sh -c "echo \\$PPID" > "$OUT/pid.$RANK"; if [ "$RANK" = $((N - 1)) ]; then '
              'while [ "$(ls "$OUT" | grep -c "^start\\.")" -lt "$N" ]; do sleep 0.01; done; '
              'date +%s.%N > "$OUT/.failed"; mv "$OUT/.failed" "$OUT/failed"; exit 1; fi; '
              'exec sleep 1000')
    try:
        _, procs, threads, ends = launch(launcher, n, script, out)
        deadline = time.time() + 600
        while not os.path.exists(os.path.join(out, "failed")) and time.time() < deadline:
            if all(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        if not os.path.exists(os.path.join(out, "failed")):
            kill_all(procs)
            return "failed (the failing worker never ran)"
        failed_at = float(open(os.path.join(out, "failed")).read())
        for t in threads:
            t.join(timeout=max(0.0, failed_at + limit - time.time()))
        if any(t.is_alive() for t in threads):
            kill_all(procs)
            return f"did not stop within {limit:g} s"
        return f"{(max(ends) - failed_at) * 1000:.0f}"
    finally:
        kill_all(procs)
        kill_sleepers(out)
        shutil.rmtree(out, ignore_errors=True)


def main():
    what, launcher, n, arg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if what == "rdzv":
        print(rdzv(launcher, n, int(arg)))
    else:
        print(stop(launcher, n, float(arg)))


if __name__ == "__main__":
    main()
