"""fuse_stall: run a command with a FUSE file whose reads never finish.

    unshare -m --propagation private python3 fuse_stall.py MNT READY -- CMD...

Mounts a one-file FUSE file system on MNT (a private mount namespace: the
test's own, nothing outside it changes), serves it from a thread, and runs
CMD. MNT/stall opens with direct I/O and a read of it is taken by this server
and never answered: once a fatal signal interrupts it, the reader waits in
uninterruptible sleep (D), which SIGKILL cannot end, until the connection
goes away. When CMD exits this closes the connection (every stalled reader
then dies) and exits with CMD's status. READ appears when a read has stalled.
"""
import ctypes
import os
import struct
import subprocess
import sys
import threading

OP_LOOKUP, OP_FORGET, OP_GETATTR, OP_OPEN, OP_READ = 1, 2, 3, 14, 15
OP_INIT, OP_INTERRUPT, OP_BATCH_FORGET = 26, 36, 42
ENOENT, ENOSYS = 2, 38
FOPEN_DIRECT_IO = 1
ROOT, FILE = 1, 2


def attr(ino, mode):
    # fuse_attr: ino size blocks atime mtime ctime, 3 nsec, mode nlink uid gid
    # rdev blksize flags
    return struct.pack("<QQQQQQIIIIIIIIII", ino, 1 << 20, 0, 0, 0, 0, 0, 0, 0, mode, 1,
                       0, 0, 0, 4096, 0)


def serve(fd, ready):
    while True:
        try:
            req = os.read(fd, 1 << 20)
        except OSError:
            return  # the connection went away
        length, op, unique, node = struct.unpack_from("<IIQQ", req)
        body = req[40:length]
        if op in (OP_FORGET, OP_BATCH_FORGET, OP_INTERRUPT):
            continue  # no reply: an interrupted read stays unanswered
        if op == OP_READ:
            with open(ready + ".tmp", "w"):
                pass
            os.rename(ready + ".tmp", ready)
            continue
        err, out = 0, b""
        if op == OP_INIT:
            major, minor = struct.unpack_from("<II", body)
            out = struct.pack("<IIIIHHIIHHI7I", 7, minor, 0, 0, 0, 0, 4096, 1, 0, 0, 0,
                              *([0] * 7))
        elif op == OP_LOOKUP and node == ROOT and body.rstrip(b"\0") == b"stall":
            out = struct.pack("<QQQQII", FILE, 0, 0, 0, 0, 0) + attr(FILE, 0o100444)
        elif op == OP_LOOKUP:
            err = -ENOENT
        elif op == OP_GETATTR:
            out = struct.pack("<QII", 0, 0, 0) + attr(node, 0o40555 if node == ROOT
                                                       else 0o100444)
        elif op == OP_OPEN:
            out = struct.pack("<QII", 0, FOPEN_DIRECT_IO, 0)
        else:
            err = -ENOSYS
        try:
            os.write(fd, struct.pack("<IiQ", 16 + len(out), err, unique) + out)
        except OSError:
            pass


def main():
    mnt, ready, cmd = sys.argv[1], sys.argv[2], sys.argv[4:]
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()}".encode()
    if libc.mount(b"ddptest", mnt.encode(), b"fuse", 0, opts) != 0:
        e = ctypes.get_errno()
        print(f"fuse_stall: cannot mount FUSE on {mnt}: {os.strerror(e)}", file=sys.stderr)
        return 77
    threading.Thread(target=serve, args=(fd, ready), daemon=True).start()
    rc = subprocess.call(cmd)
    os.close(fd)  # aborts the connection: the stalled readers die
    return rc


if __name__ == "__main__":
    sys.exit(main())
