"""A training worker for the --forward-signals tests (stdlib only): on
SIGUSR1 it saves a checkpoint and trains on; every SIGUSR1/SIGUSR2 it gets
is appended to OUT/got.<RANK>. OUT/ready.<RANK> (its pid) appears once the
handlers are in place; it ends with 0 once OUT/stop exists, printing how
many checkpoints it saved.
    python3 ckpt_worker.py OUT"""
import os
import signal
import sys
import time

out, rank = sys.argv[1], os.environ["RANK"]
step = 0
saved = 0


def write_whole(path, text):
    """Write then rename: a reader never sees part of a file."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def note(sig):
    fd = os.open(os.path.join(out, f"got.{rank}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (signal.Signals(sig).name + "\n").encode())
    os.close(fd)


def on_usr1(sig, frame):
    global saved
    saved += 1
    write_whole(os.path.join(out, f"ckpt.{rank}.{saved}"), f"step {step}\n")
    note(sig)


signal.signal(signal.SIGUSR1, on_usr1)
signal.signal(signal.SIGUSR2, lambda sig, frame: note(sig))
write_whole(os.path.join(out, f"ready.{rank}"), f"{os.getpid()}\n")
while not os.path.exists(os.path.join(out, "stop")):
    step += 1  # a training step
    time.sleep(0.02)
print(f"rank {rank}: {saved} checkpoint(s)", flush=True)
