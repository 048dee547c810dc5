"""Helpers for the store tests (e2e and compat): a `ddpstore serve` under test,
the ddpstore CLI, and raw TCPStore wire messages for both dialects.
Self-contained (no conftest import) so tests/compat can load it by path.
Every wait here is bounded."""
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DDP_BUILD", os.path.join(REPO, "build"))
DDPSTORE = os.path.join(BUILD, "bin", "ddpstore")

# Exit statuses of ddpstore (man/ddpstore.1).
OK, ERROR, USAGE, NOT_FOUND, TIMEOUT, CONN, CAS_FAILED = 0, 1, 2, 3, 4, 5, 6

MAGIC = 0x3C85F7CE
# 2.x opcodes
V2 = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6,
          GETNUMKEYS=7, DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11,
          CANCEL_WAIT=12, PING=13, QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16,
          LIST_KEYS=17, BARRIER=18,
          ON_CLOSE_SET=0x80)
# 1.x opcodes
V1 = dict(SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6,
          WATCH_KEY=7, DELETE_KEY=8)


def s(b):
    """A string/bytes field: u64 length + bytes."""
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def keys(*ks):
    return struct.pack("<Q", len(ks)) + b"".join(s(k) for k in ks)


def i64(v):
    return struct.pack("<q", v)


VALIDATE = bytes([0]) + struct.pack("<I", MAGIC)


def connect(port, host="127.0.0.1", v2=True, timeout=10.0, rcvbuf=None):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    c = socket.socket(fam, socket.SOCK_STREAM)
    if rcvbuf:  # before connect, so the advertised window stays small
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    c.settimeout(timeout)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.connect((host, port))
    if v2:
        c.sendall(VALIDATE)
    return c


def recv_exact(c, n):
    buf = b""
    while len(buf) < n:
        d = c.recv(n - len(buf))
        if not d:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += d
    return buf


def recv_bytes(c):
    (n,) = struct.unpack("<Q", recv_exact(c, 8))
    return recv_exact(c, n)


def recv_i64(c):
    return struct.unpack("<q", recv_exact(c, 8))[0]


def closed_by_peer(c, timeout=10.0):
    """True once the server closed c (EOF or reset) within timeout."""
    c.settimeout(timeout)
    try:
        while True:
            d = c.recv(65536)
            if not d:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Server:
    """A `ddpstore serve` on loopback; its stderr goes to a file (log())."""

    def __init__(self, *args, host="127.0.0.1", preexec_fn=None, env=None, wrap=()):
        self.final_log = None
        self.dir = tempfile.mkdtemp(prefix="ddpstore-test-")
        self.port_file = os.path.join(self.dir, "port")
        self.log_path = os.path.join(self.dir, "stderr")
        cmd = list(wrap) + [DDPSTORE, "serve", "--port", "0", "--port-file", self.port_file]
        if host is not None:
            cmd += ["--host", host]
        cmd += list(args)
        self.errf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.errf,
                                     start_new_session=True, preexec_fn=preexec_fn,
                                     env=env)
        deadline = time.monotonic() + 15
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ddpstore serve exited {self.proc.returncode}: "
                                   + self.log())
            if time.monotonic() > deadline:
                raise RuntimeError("ddpstore serve did not write its port file")
            time.sleep(0.01)
        with open(self.port_file) as f:
            self.port = int(f.read())
        self.addr = f"127.0.0.1:{self.port}"

    def log(self):
        if self.final_log is not None:
            return self.final_log
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def _remove_dir(self):
        """Once the server is gone: its log is kept for log(), its directory
        removed (each test run left ~40 of them in the machine's /tmp)."""
        self.errf.close()
        if self.final_log is None:
            self.final_log = self.log()
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait_log(self, text, timeout=10.0):
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def stop(self):
        """SIGTERM, then the exit status (SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._remove_dir()
        return self.proc.returncode

    def close(self):
        """Stop with SIGTERM and return the exit status: 0 means a clean
        shutdown (and, in a SAN=1 build, no leak or memory error)."""
        rc = self.stop()
        if rc != 0:
            print(self.log())
        return rc

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self._remove_dir()


def cli(addr, *args, input=None, timeout=30, env=None, text=False):
    """Run `ddpstore --addr addr args...`; returns CompletedProcess (bytes)."""
    cmd = [DDPSTORE] + (["--addr", addr] if addr else []) + list(args)
    r = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, env=env)
    if text:
        r.stdout = r.stdout.decode()
        r.stderr = r.stderr.decode()
    return r


def vmhwm_kib(pid):
    """Peak resident memory of pid (VmHWM), KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def recv_list(c):
    """LIST_KEYS' reply: i64 n, then n strings."""
    (n,) = struct.unpack("<q", recv_exact(c, 8))
    return [recv_bytes(c) for _ in range(n)]
