"""A worker that counts the stop signals it gets (stdlib only): SIGTERM,
SIGINT and SIGHUP stay blocked and are taken with sigtimedwait, each
appended to OUT/term.<RANK> as the name of its sender (/proc/<pid>/comm).
OUT/<READY>.<RANK> (its pid; READY is ready unless --ready says) appears
first. After the first signal it lives on 1 s (--linger S), as a worker
saving a checkpoint would, and exits 0, leaving OUT/done.<RANK> (one killed
leaves none); with --stay it stays, to be killed.
Bounded: 120 s in all. Also the Slurm tests' worker (tests/slurm).
    python3 term_worker.py OUT [--stay] [--ready NAME] [--linger S]"""
import os
import signal
import sys
import time

out, rank = sys.argv[1], os.environ["RANK"]
opts = sys.argv[2:]
stay = "--stay" in opts
ready = opts[opts.index("--ready") + 1] if "--ready" in opts else "ready"
linger = float(opts[opts.index("--linger") + 1]) if "--linger" in opts else 1.0
SIGS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
signal.pthread_sigmask(signal.SIG_BLOCK, SIGS)
with open(os.path.join(out, f".{ready}.{rank}"), "w") as f:
    f.write(f"{os.getpid()}\n")
os.rename(os.path.join(out, f".{ready}.{rank}"), os.path.join(out, f"{ready}.{rank}"))
end = time.monotonic() + 120
first = None
while time.monotonic() < end and (stay or first is None or time.monotonic() < first + linger):
    si = signal.sigtimedwait(SIGS, 0.05)
    if si is None:
        continue
    try:
        sender = open(f"/proc/{si.si_pid}/comm").read().strip()
    except OSError:
        sender = f"pid {si.si_pid}"
    fd = os.open(os.path.join(out, f"term.{rank}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{signal.Signals(si.si_signo).name} {sender}\n".encode())
    os.close(fd)
    if first is None:
        first = time.monotonic()
open(os.path.join(out, f"done.{rank}"), "w").close()
