"""A worker that counts the stop signals it gets (stdlib only): SIGTERM,
SIGINT and SIGHUP stay blocked and are taken with sigtimedwait, each
appended to OUT/term.<RANK> as the name of its sender (/proc/<pid>/comm).
OUT/ready.<RANK> (its pid) appears first. After the first it lives on 1 s,
as a worker saving a checkpoint would, and exits 0; with --stay it stays
(bounded: 60 s in all), to be killed.
    python3 term_worker.py OUT [--stay]"""
import os
import signal
import sys
import time

out, rank = sys.argv[1], os.environ["RANK"]
stay = "--stay" in sys.argv[2:]
SIGS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
signal.pthread_sigmask(signal.SIG_BLOCK, SIGS)
with open(os.path.join(out, f".ready.{rank}"), "w") as f:
    f.write(f"{os.getpid()}\n")
os.rename(os.path.join(out, f".ready.{rank}"), os.path.join(out, f"ready.{rank}"))
end = time.monotonic() + 60
first = None
while time.monotonic() < end and (stay or first is None or time.monotonic() < first + 1):
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
