"""The store server on the wire: both dialects, parked waiters, the ddp
ON_CLOSE_SET extension, and robustness -- garbage, huge declared lengths,
stalled and non-reading clients, the connection limit, 10,000 connections."""
import os
import random
import resource
import selectors
import socket
import struct
import subprocess
import time

import pytest

from storeutil import (CONN, DDPSTORE, OK, V1, V2, VALIDATE, Server, cli, closed_by_peer, connect, i64,
                       keys, recv_bytes, recv_exact, recv_i64, recv_list, rss_kib, s, vmhwm_kib)

# One worker runs the whole module (tests/run.sh: --dist loadgroup): its
# module-scoped fixture, once.
pytestmark = pytest.mark.xdist_group("test_store_server")


def _uring_usable():
    """Can ddpstore serve with io_uring here (kernel, sysctl, seccomp)?"""
    env = dict(os.environ, DDP_STORE_IO="uring")
    try:
        sv = Server(env=env)
    except RuntimeError:
        return False
    sv.close()
    return True


@pytest.fixture(scope="module", autouse=True, params=["uring", "uv"])
def io(request):
    """Every test here runs against both transports of the server: its
    connections over io_uring and over libuv streams (DDP_STORE_IO)."""
    if request.param == "uring" and not _uring_usable():
        pytest.skip("io_uring is not available (built without liburing, kernel older than 6.0, "
                    "kernel.io_uring_disabled, or a seccomp filter)")
    old = os.environ.get("DDP_STORE_IO")
    os.environ["DDP_STORE_IO"] = request.param
    yield request.param
    if old is None:
        del os.environ["DDP_STORE_IO"]
    else:
        os.environ["DDP_STORE_IO"] = old


@pytest.fixture(scope="module")
def srv(io):
    sv = Server()
    assert f"({'io_uring' if io == 'uring' else 'libuv'})" in sv.log()
    yield sv
    assert sv.close() == 0


def test_both_dialects_share_one_key_space(srv):
    a = connect(srv.port, v2=False)
    b = connect(srv.port)
    a.sendall(bytes([V1["SET"]]) + s("/shared") + s("from-1.x"))
    # SET has no reply: a CHECK on the same connection says it was applied
    # (two connections' requests are served in no particular order).
    a.sendall(bytes([V1["CHECK"]]) + keys("/shared"))
    assert recv_exact(a, 1) == b"\x00"  # READY
    b.sendall(bytes([V2["GET"]]) + s("/shared"))
    assert recv_bytes(b) == b"from-1.x"
    b.sendall(bytes([V2["ADD"]]) + s("/n") + i64(41))
    assert recv_i64(b) == 41
    a.sendall(bytes([V1["ADD"]]) + s("/n") + i64(1))
    assert recv_i64(a) == 42
    a.close()
    b.close()


def test_waiter_parked_until_the_key_is_set(srv):
    w = connect(srv.port)
    w.sendall(bytes([V2["WAIT"]]) + keys("/p1", "/p2"))
    w.settimeout(0.2)
    with pytest.raises(socket.timeout):
        w.recv(1)
    c = connect(srv.port)
    c.sendall(bytes([V2["SET"]]) + s("/p1") + s("x"))
    with pytest.raises(socket.timeout):
        w.recv(1)  # one key of two
    c.sendall(bytes([V2["MULTI_SET"]]) + struct.pack("<q", 1) + s("/p2") + s("y"))
    w.settimeout(10)
    assert recv_exact(w, 1) == b"\x00"  # STOP_WAITING
    w.close()
    c.close()


def test_cancel_wait_replies_wait_canceled(srv):
    w = connect(srv.port)
    w.sendall(bytes([V2["WAIT"]]) + keys("/never"))
    w.sendall(bytes([V2["CANCEL_WAIT"]]))
    assert recv_exact(w, 1) == b"\x01"
    # The cancelled waiter is gone: setting the key sends nothing more.
    c = connect(srv.port)
    c.sendall(bytes([V2["SET"]]) + s("/never") + s("now"))
    w.sendall(bytes([V2["PING"]]) + struct.pack("<I", 7))
    assert recv_exact(w, 4) == struct.pack("<I", 7)
    w.close()
    c.close()


def test_waiter_of_a_closed_connection_is_dropped(srv):
    for _ in range(50):
        w = connect(srv.port)
        w.sendall(bytes([V2["WAIT"]]) + keys("/dropped"))
        w.close()
    c = connect(srv.port)
    c.sendall(bytes([V2["SET"]]) + s("/dropped") + s("v"))
    c.sendall(bytes([V2["GETNUMKEYS"]]))
    assert recv_i64(c) >= 1
    c.close()
    assert cli(srv.addr, "ping").returncode == OK


def test_get_of_missing_key_per_dialect(srv):
    b = connect(srv.port)
    b.sendall(bytes([V2["GET"]]) + s("/missing"))
    assert recv_bytes(b) == b""  # 2.x: empty, as PyTorch's libuv server
    b.close()
    a = connect(srv.port, v2=False)
    a.sendall(bytes([V1["GET"]]) + s("/missing"))
    assert closed_by_peer(a)  # 1.x: closed, as PyTorch 1.13's server
    assert srv.wait_log("GET of a missing key")


def test_queues_and_multi_get(srv):
    c = connect(srv.port)
    for item in (b"one", b"two"):
        c.sendall(bytes([V2["QUEUE_PUSH"]]) + s("/q") + s(item))
    c.sendall(bytes([V2["QUEUE_LEN"]]) + s("/q"))
    assert recv_i64(c) == 2
    c.sendall(bytes([V2["QUEUE_POP"]]) + s("/q"))
    assert recv_i64(c) == 2 and recv_bytes(c) == b"one"
    c.sendall(bytes([V2["SET"]]) + s("/m1") + s("a"))
    c.sendall(bytes([V2["MULTI_GET"]]) + keys("/m1", "/absent"))
    assert recv_bytes(c) == b"a" and recv_bytes(c) == b""
    c.close()


def test_on_close_set_wakes_waiters_when_its_connection_dies(srv):
    agent = connect(srv.port)
    agent.sendall(bytes([V2["ON_CLOSE_SET"]]) + s("/job/1/failed") + s("agent 3 died"))
    assert recv_exact(agent, 1) == b"\x00"  # in force
    peers = [connect(srv.port) for _ in range(3)]
    for p in peers:
        p.sendall(bytes([V2["WAIT"]]) + keys("/job/1/failed"))
    agent.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    agent.close()  # a reset, as when the agent is killed
    for p in peers:
        p.settimeout(10)
        assert recv_exact(p, 1) == b"\x00"
        p.sendall(bytes([V2["GET"]]) + s("/job/1/failed"))
        assert recv_bytes(p) == b"agent 3 died"
        p.close()


def test_on_close_set_runs_after_a_protocol_error_and_can_be_cleared(srv):
    a = connect(srv.port)
    a.sendall(bytes([V2["ON_CLOSE_SET"]]) + s("/oc/err") + s("1"))
    assert recv_exact(a, 1) == b"\x00"
    a.sendall(b"\x7f")  # unknown opcode: closed, the registration runs
    assert closed_by_peer(a)
    b = connect(srv.port)
    b.sendall(bytes([V2["ON_CLOSE_SET"]]) + s("/oc/cleared") + s("1"))
    assert recv_exact(b, 1) == b"\x00"
    b.sendall(bytes([V2["ON_CLOSE_SET"]]) + s("") + s(""))
    assert recv_exact(b, 1) == b"\x00"
    b.close()
    c = connect(srv.port)
    c.sendall(bytes([V2["WAIT"]]) + keys("/oc/err"))
    assert recv_exact(c, 1) == b"\x00"
    c.sendall(bytes([V2["CHECK"]]) + keys("/oc/cleared"))
    assert recv_exact(c, 1) == b"\x01"  # NOT_READY: cleared, never set
    c.close()


def test_on_close_set_only_creates_the_key(srv):
    a = connect(srv.port)
    a.sendall(bytes([V2["ON_CLOSE_SET"]]) + s("/r0/end") + s("lost:1"))
    assert recv_exact(a, 1) == b"\x00"
    b = connect(srv.port)
    b.sendall(bytes([V2["SET"]]) + s("/r0/end") + s("ok"))
    b.sendall(bytes([V2["GET"]]) + s("/r0/end"))
    assert recv_bytes(b) == b"ok"
    a.sendall(b"\x7f")  # the server closes a, running its registration, first
    assert closed_by_peer(a)
    b.sendall(bytes([V2["GET"]]) + s("/r0/end"))
    assert recv_bytes(b) == b"ok"  # the first reason stays
    b.close()


def test_on_close_set_is_not_in_the_1x_dialect(srv):
    a = connect(srv.port, v2=False)
    a.sendall(bytes([0x80]) + s("/k") + s("v"))
    assert closed_by_peer(a)


def test_garbage_closes_only_that_connection_with_one_log_line():
    sv = Server()
    try:
        rnd = random.Random(1234)
        good = connect(sv.port)
        n_bad = 20
        for i in range(n_bad):
            g = connect(sv.port, v2=(i % 2 == 0))
            g.sendall(bytes([0x42 + i]) + bytes(rnd.getrandbits(8) for _ in range(200)))
            assert closed_by_peer(g)
            g.close()
        good.sendall(bytes([V2["PING"]]) + struct.pack("<I", 99))
        assert recv_exact(good, 4) == struct.pack("<I", 99)
        assert sv.wait_log("unknown opcode")
        lines = [ln for ln in sv.log().splitlines() if "closing connection" in ln]
        assert len(lines) == n_bad
        good.close()
    finally:
        assert sv.close() == 0


def test_huge_declared_lengths_allocate_nothing():
    sv = Server()
    try:
        before = rss_kib(sv.proc.pid)
        for hdr in (
            bytes([V2["SET"]]) + struct.pack("<Q", 1 << 62),            # key length
            bytes([V2["SET"]]) + s("/k") + struct.pack("<Q", 1 << 40),  # value length
            bytes([V2["WAIT"]]) + struct.pack("<Q", 1 << 50),           # key count
            bytes([V2["MULTI_SET"]]) + struct.pack("<Q", 1 << 20),
        ):
            c = connect(sv.port)
            c.sendall(hdr)
            assert closed_by_peer(c)
            c.close()
        # A 1.x probe whose first bytes read as a 1 GB key (the classic crash).
        c = connect(sv.port, v2=False)
        c.sendall(b"\x00" + struct.pack("<Q", 0x3C85F7CE00))
        assert closed_by_peer(c)
        assert rss_kib(sv.proc.pid) - before < 16 * 1024
        assert cli(sv.addr, "ping").returncode == OK
        assert sv.log().count("over the limit") == 5
    finally:
        assert sv.close() == 0


def test_a_stalled_client_does_not_slow_the_others(srv):
    stalled = connect(srv.port)
    # Half a SET: the header promises 1000 value bytes, 10 arrive, then nothing.
    stalled.sendall(bytes([V2["SET"]]) + s("/stall") + struct.pack("<Q", 1000) + b"x" * 10)
    c = connect(srv.port)
    c.settimeout(5)  # generous: no timing is asserted, only that it is served
    for i in range(200):
        c.sendall(bytes([V2["SET"]]) + s(f"/busy{i}") + s("v"))
        c.sendall(bytes([V2["GET"]]) + s(f"/busy{i}"))
        assert recv_bytes(c) == b"v"
    # The stalled one completes later and is still served.
    stalled.sendall(b"y" * 990)
    stalled.sendall(bytes([V2["GET"]]) + s("/stall"))
    assert recv_bytes(stalled) == b"x" * 10 + b"y" * 990
    stalled.close()
    c.close()


def test_a_client_that_never_reads_is_paused_not_buffered():
    sv = Server("--max-conn-buffer", str(1 << 20), "--max-value-len", str(256 << 10))
    try:
        c = connect(sv.port, rcvbuf=65536)
        c.sendall(bytes([V2["SET"]]) + s("/big") + s(b"z" * (256 << 10)))
        before = rss_kib(sv.proc.pid)
        # 200 GETs of 256 KiB = 50 MiB of replies that nobody reads yet.
        c.sendall((bytes([V2["GET"]]) + s("/big")) * 200)
        assert cli(sv.addr, "ping").returncode == OK
        assert rss_kib(sv.proc.pid) - before < 24 * 1024
        # Reading drains it: every reply arrives, in order.
        c.settimeout(30)
        for _ in range(200):
            assert len(recv_bytes(c)) == 256 << 10
        # Pause and resume many times while the client reads as fast as it
        # can: a write that completes at once defers its callback past the
        # poll phase, and the replies it lets through must still be sent
        # (this hung once in a while before the server kept poll from
        # blocking while replies were queued).
        for _ in range(10):
            c.sendall((bytes([V2["GET"]]) + s("/big")) * 40)
            for _ in range(40):
                assert len(recv_bytes(c)) == 256 << 10
        c.close()
    finally:
        assert sv.close() == 0


def test_watch_key_pushes_changes_in_the_1x_format(srv):
    w = connect(srv.port, v2=False)
    w.sendall(bytes([V1["WATCH_KEY"]]) + s("/wk"))
    assert recv_exact(w, 1) == b"\x03"  # KEY_CALLBACK_REGISTERED
    c = connect(srv.port)
    c.sendall(bytes([V2["SET"]]) + s("/wk") + s("one"))
    c.sendall(bytes([V2["SET"]]) + s("/wk") + s("two"))
    c.sendall(bytes([V2["DELETE_KEY"]]) + s("/wk"))
    assert recv_i64(c) == 1
    # type (CREATED=1, UPDATED=0, DELETED=2), key, old value, new value
    for typ, old, new in ((1, b"", b"one"), (0, b"one", b"two"), (2, b"two", b"")):
        assert recv_exact(w, 1) == bytes([typ])
        assert recv_bytes(w) == b"/wk"
        assert recv_bytes(w) == old
        assert recv_bytes(w) == new
    w.close()
    c.close()


def test_a_watcher_that_never_reads_is_closed():
    sv = Server("--max-conn-buffer", str(1 << 20), "--max-value-len", str(256 << 10))
    try:
        w = connect(sv.port, v2=False, rcvbuf=4096)
        w.sendall(bytes([V1["WATCH_KEY"]]) + s("/watched"))
        assert recv_exact(w, 1) == b"\x03"  # KEY_CALLBACK_REGISTERED
        c = connect(sv.port)
        # 25 MiB of notifications: far more than kernel buffers can hide.
        for i in range(100):
            c.sendall(bytes([V2["SET"]]) + s("/watched") + s(bytes([i]) * (256 << 10)))
        assert sv.wait_log("not reading its replies")
        c.sendall(bytes([V2["PING"]]) + struct.pack("<I", 5))
        assert recv_exact(c, 4) == struct.pack("<I", 5)
        c.close()
        w.close()
    finally:
        assert sv.close() == 0


def test_connection_limit_gives_a_clear_refusal():
    sv = Server("--max-conns", "3")
    try:
        held = [connect(sv.port) for _ in range(3)]
        for h in held:
            h.sendall(bytes([V2["PING"]]) + struct.pack("<I", 1))
            recv_exact(h, 4)
        extra = connect(sv.port)
        assert closed_by_peer(extra)
        assert sv.wait_log("connection limit (3) reached")
        r = cli(sv.addr, "ping", "--connect-timeout", "2", text=True)
        assert r.returncode == CONN and "connection limit" in r.stderr
        held.pop().close()
        deadline = time.monotonic() + 10
        while cli(sv.addr, "ping").returncode != OK:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for h in held:
            h.close()
    finally:
        assert sv.close() == 0


def _raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_ten_thousand_concurrent_connections():
    n = 10000
    if _raise_nofile(n + 200) < n + 100:
        pytest.fail("this test needs RLIMIT_NOFILE >= 10100 (raise the hard limit)")
    sv = Server("--max-conns", str(n + 10))
    conns = []
    sel = selectors.DefaultSelector()
    try:
        for i in range(n):
            c = connect(sv.port, v2=False)
            c.setblocking(False)
            conns.append(c)
            # Each asks something only it can answer: ADD to its own key.
            c.send(bytes([V1["ADD"]]) + s(f"/c{i}") + i64(i + 1))
            sel.register(c, selectors.EVENT_READ, i)
        got = {}
        deadline = time.monotonic() + 120
        while len(got) < n and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                data = key.fileobj.recv(8)
                assert len(data) == 8  # one small reply arrives whole on loopback
                got[key.data] = struct.unpack("<q", data)[0]
                sel.unregister(key.fileobj)
        assert len(got) == n and all(got[i] == i + 1 for i in range(n))
        assert cli(sv.addr, "numkeys", text=True).stdout == f"{n}\n"
    finally:
        for c in conns:
            c.close()
        sel.close()
        assert sv.close() == 0
    assert "refusing" not in sv.log()


def test_open_files_limit_too_low_is_reported():
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    sv = Server("--max-conns", "1000", preexec_fn=low_limit)
    conns = []
    try:
        assert sv.wait_log("open-files limit (RLIMIT_NOFILE) is 64")
        for _ in range(80):
            conns.append(connect(sv.port))
        assert sv.wait_log("open-files limit (RLIMIT_NOFILE 64) reached")
        # The connections it did accept are still served.
        conns[0].sendall(bytes([V2["PING"]]) + struct.pack("<I", 3))
        assert recv_exact(conns[0], 4) == struct.pack("<I", 3)
    finally:
        for c in conns:
            c.close()
        assert sv.close() == 0


def test_validate_then_1x_opcodes_are_2x(srv):
    # After VALIDATE, byte 0x00 is not SET: the 2.x table applies.
    c = connect(srv.port)
    c.sendall(VALIDATE)
    assert closed_by_peer(c)
    assert srv.wait_log("repeated VALIDATE")


def _tcp_timer(local_port, remote_port):
    """The timer field of a /proc/net/tcp entry: "tr:when" (tr 2 = keepalive)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            loc, rem = fields[1], fields[2]
            if int(loc.split(":")[1], 16) == local_port and int(rem.split(":")[1], 16) == remote_port:
                return fields[5]
    return None


def test_accepted_connections_have_tcp_keepalive(srv):
    # So a peer whose host dies is closed (and its ON_CLOSE_SET runs).
    c = connect(srv.port)
    c.sendall(bytes([V2["PING"]]) + struct.pack("<I", 1))
    recv_exact(c, 4)
    time.sleep(0.1)  # let the delayed-ACK timer expire: then only keepalive runs
    timer = _tcp_timer(srv.port, c.getsockname()[1])
    c.close()
    assert timer is not None and timer.split(":")[0] == "02"
    # The keepalive fires within the configured 15 s idle time.
    assert int(timer.split(":")[1], 16) <= 15 * 100 + 100  # in USER_HZ (100/s) ticks


NO_URING = os.path.join(os.path.dirname(DDPSTORE), "..", "tests", "progs", "no_uring")


def test_where_io_uring_is_refused_auto_serves_with_libuv(io):
    """A seccomp filter refusing io_uring_setup (Docker's default profile
    does): auto falls back to libuv streams and serves; uring is an error."""
    sv = Server(env=dict(os.environ, DDP_STORE_IO="auto"), wrap=[NO_URING])
    try:
        assert "(libuv)" in sv.log()
        assert cli(sv.addr, "set", "k", "v").returncode == OK
        assert cli(sv.addr, "get", "k").stdout == b"v"
    finally:
        assert sv.close() == 0
    r = subprocess.run([NO_URING, DDPSTORE, "serve", "--port", "0"], capture_output=True,
                       env=dict(os.environ, DDP_STORE_IO="uring"), timeout=30)
    assert r.returncode == 1
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "with io_uring (DDP_STORE_IO=uring)" in err[0], err


def test_a_bad_io_choice_is_a_usage_error(io):
    r = subprocess.run([DDPSTORE, "serve", "--port", "0"], capture_output=True,
                       env=dict(os.environ, DDP_STORE_IO="epoll"), timeout=30)
    assert r.returncode == 2
    assert r.stderr.decode().strip() == "ddpstore: bad DDP_STORE_IO 'epoll' (auto, uring or uv)"


def test_a_value_of_the_largest_size_round_trips(srv):
    """8 MiB (the default limit) arrives in thousands of receives (2 KiB
    buffers with io_uring) and is joined into one message."""
    big = os.urandom(1 << 16) * 128
    c = connect(srv.port, timeout=60)
    c.sendall(bytes([V2["SET"]]) + s("/largest") + s(big))
    c.sendall(bytes([V2["GET"]]) + s("/largest"))
    assert recv_bytes(c) == big
    # One byte more is refused: that connection only is closed.
    c.sendall(bytes([V2["SET"]]) + s("/largest") + struct.pack("<Q", len(big) + 1))
    assert closed_by_peer(c)
    c.close()
    assert cli(srv.addr, "ping").returncode == OK


def _read_all(conns, want, timeout=60.0):
    """Read every connection until it has its want[c] bytes (any pace: the
    reader is slower than the server on purpose); bytes received each."""
    sel = selectors.DefaultSelector()
    got = {c: 0 for c in conns}
    for c in conns:
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ)
    left = set(conns)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for k, _ in sel.select(0.5):
            c = k.fileobj
            d = c.recv(16384)
            got[c] += len(d)
            if not d or got[c] >= want[c]:
                sel.unregister(c)
                left.discard(c)
    sel.close()
    return got


def test_big_replies_read_slowly_all_arrive(srv):
    """Replies much larger than the socket buffers go out in many short
    sends. With io_uring the SEND for the rest of a short send was queued
    by the completion and, when that completion was reaped by the flush's
    own submit, nothing submitted it: the connection stalled until some
    other client woke the server. Pipelined 2.x GETs, one MULTI_GET and
    pipelined 1.x GETs, several connections at once, a few rounds."""
    big = os.urandom(1 << 16) * 128  # 8 MiB, the default value limit
    c = connect(srv.port, timeout=60)
    c.sendall(bytes([V2["SET"]]) + s("/slowbig") + s(big))
    c.sendall(bytes([V2["PING"]]) + struct.pack("<I", 1))
    assert recv_exact(c, 4) == struct.pack("<I", 1)
    c.close()
    reply = 4 * (8 + len(big))
    for _ in range(3):
        conns = [connect(srv.port) for _ in range(4)]
        for x in conns:
            x.sendall((bytes([V2["GET"]]) + s("/slowbig")) * 4)
        m = connect(srv.port)
        m.sendall(bytes([V2["MULTI_GET"]]) + keys(*["/slowbig"] * 4))
        v1 = connect(srv.port, v2=False)
        v1.sendall((bytes([V1["GET"]]) + s("/slowbig")) * 4)
        conns += [m, v1]
        got = _read_all(conns, {x: reply for x in conns})
        assert list(got.values()) == [reply] * len(conns)
        for x in conns:
            x.close()


def _parked(c, timeout=0.5):
    """True if nothing arrives on c within timeout (the request is parked).
    Only used where the opposite outcome is checked right after, so a slow
    machine can only make it pass vacuously, never fail falsely."""
    c.settimeout(timeout)
    try:
        c.recv(1)
    except socket.timeout:
        return True
    return False


def test_list_keys_lists_value_keys_not_queues():
    sv = Server()
    try:
        c = connect(sv.port)
        c.sendall(bytes([V2["LIST_KEYS"]]))
        assert recv_list(c) == []
        c.sendall(bytes([V2["SET"]]) + s("/a") + s("1"))
        c.sendall(bytes([V2["ADD"]]) + s("/n") + i64(2))
        assert recv_i64(c) == 2
        c.sendall(bytes([V2["QUEUE_PUSH"]]) + s("/q") + s("item"))
        c.sendall(bytes([V2["SET"]]) + s("/gone") + s("x"))
        c.sendall(bytes([V2["DELETE_KEY"]]) + s("/gone"))
        assert recv_i64(c) == 1
        c.sendall(bytes([V2["LIST_KEYS"]]))
        assert sorted(recv_list(c)) == [b"/a", b"/n"]
        # The connection goes on (a reply, not a close).
        c.sendall(bytes([V2["GETNUMKEYS"]]))
        assert recv_i64(c) == 2
        c.close()
    finally:
        assert sv.close() == 0


def test_barrier_releases_every_caller_on_the_last_arrival(srv):
    a, b, c = connect(srv.port), connect(srv.port), connect(srv.port)
    a.sendall(bytes([V2["BARRIER"]]) + s("/bar") + i64(3))
    b.sendall(bytes([V2["BARRIER"]]) + s("/bar") + i64(3))
    # The counter is a decimal value, like ADD's: 2 arrivals so far.
    c.sendall(bytes([V2["WAIT"]]) + keys("/bar"))
    assert recv_exact(c, 1) == b"\x00"
    for _ in range(100):
        c.sendall(bytes([V2["GET"]]) + s("/bar"))
        if recv_bytes(c) == b"2":
            break
        time.sleep(0.05)
    else:
        pytest.fail("the two arrivals were not counted")
    assert _parked(a) and _parked(b)
    # Other writes of the key do not release it; only an arrival does.
    c.sendall(bytes([V2["ADD"]]) + s("/bar") + i64(0))
    assert recv_i64(c) == 2
    assert _parked(a)
    c.sendall(bytes([V2["BARRIER"]]) + s("/bar") + i64(3))
    for x in (a, b, c):
        x.settimeout(10)
        assert recv_exact(x, 1) == b"\x00"  # STOP_WAITING
    c.sendall(bytes([V2["GET"]]) + s("/bar"))
    assert recv_bytes(c) == b"3"
    # A counter already at the world size releases at once.
    c.sendall(bytes([V2["BARRIER"]]) + s("/bar") + i64(2))
    assert recv_exact(c, 1) == b"\x00"
    for x in (a, b, c):
        x.close()


def test_barrier_timeout_cancels_and_the_connection_goes_on(srv):
    """What the 2.x client does on a barrier timeout: CANCEL_WAIT, answered
    WAIT_CANCELED; the late arrival of others then releases nobody there."""
    a, b = connect(srv.port), connect(srv.port)
    a.sendall(bytes([V2["BARRIER"]]) + s("/bt") + i64(2))
    assert _parked(a)
    a.sendall(bytes([V2["CANCEL_WAIT"]]))
    assert recv_exact(a, 1) == b"\x01"
    b.sendall(bytes([V2["BARRIER"]]) + s("/bt") + i64(2))
    assert recv_exact(b, 1) == b"\x00"
    a.sendall(bytes([V2["PING"]]) + struct.pack("<I", 4))
    assert recv_exact(a, 4) == struct.pack("<I", 4)  # no stray STOP_WAITING
    a.close()
    b.close()


def test_barrier_on_a_value_that_is_not_a_counter_closes_only_that_connection(srv):
    c = connect(srv.port)
    c.sendall(bytes([V2["SET"]]) + s("/notnum") + s("abc"))
    c.sendall(bytes([V2["BARRIER"]]) + s("/notnum") + i64(2))
    assert closed_by_peer(c)
    c.close()
    assert cli(srv.addr, "ping").returncode == OK


def test_multi_get_reply_over_the_buffer_limit_closes_that_connection():
    """300 x an 8 MiB key in a 2.5 KB request asked the server for 2.4 GB.
    Now the reply is refused: that connection is closed with one log line,
    the server's memory stays far below the attack, others are served."""
    sv = Server()
    try:
        big = os.urandom(1 << 16) * 128
        c = connect(sv.port, timeout=60)
        c.sendall(bytes([V2["SET"]]) + s("/huge") + s(big))
        other = connect(sv.port)
        c.sendall(bytes([V2["MULTI_GET"]]) + keys(*["/huge"] * 300))
        assert closed_by_peer(c, timeout=60)
        c.close()
        other.sendall(bytes([V2["GET"]]) + s("/huge"))
        other.settimeout(60)
        assert recv_bytes(other) == big
        assert vmhwm_kib(sv.proc.pid) < 512 * 1024  # the attack: 2.4 GB
        lines = [ln for ln in sv.log().splitlines() if "closing connection" in ln]
        assert len(lines) == 1 and "MULTI_GET reply of 2516584800 bytes over" in lines[0]
        # Within the limit it is served: 4 x 8 MiB.
        other.sendall(bytes([V2["MULTI_GET"]]) + keys(*["/huge"] * 4))
        for _ in range(4):
            assert recv_bytes(other) == big
        other.close()
    finally:
        assert sv.close() == 0


def test_multi_get_reply_of_the_stores_data_may_pass_the_buffer_limit():
    """8 values of 8 MiB in one MULTI_GET: 64 MiB and 64 bytes, over the 64
    MiB buffer limit. PyTorch's servers cap no reply; ours closed the
    connection. Data the store holds bounds the reply: it is answered, and
    the connection goes on."""
    sv = Server()
    try:
        vals = [bytes([i]) * (8 << 20) for i in range(8)]
        c = connect(sv.port, timeout=120)
        for i, v in enumerate(vals):
            c.sendall(bytes([V2["SET"]]) + s(f"/v{i}") + s(v))
        for _ in range(2):
            c.sendall(bytes([V2["MULTI_GET"]]) + keys(*[f"/v{i}" for i in range(8)]))
            for v in vals:
                assert recv_bytes(c) == v
        c.sendall(bytes([V2["PING"]]) + struct.pack("<I", 7))
        assert recv_exact(c, 4) == struct.pack("<I", 7)
        c.close()
        assert "closing connection" not in sv.log()
    finally:
        assert sv.close() == 0


def test_append_grows_a_value_past_the_value_limit():
    """As PyTorch's libuv server: the value limit bounds each APPEND's own
    bytes, and the value grows past it. An APPEND that passed the limit was
    dropped and its connection closed, while the client, which gets no reply
    to APPEND, went on as if it had been stored."""
    sv = Server("--max-value-len", "65536")  # the least it takes
    try:
        c = connect(sv.port)
        parts = [b"x" * 60000, b"y" * 5536, b"z", b"w" * 65536, b"v" * 65536]
        for p in parts:
            c.sendall(bytes([V2["APPEND"]]) + s("/ap") + s(p))
        c.sendall(bytes([V2["GET"]]) + s("/ap"))
        assert recv_bytes(c) == b"".join(parts)  # 196609 bytes
        c.sendall(bytes([V2["MULTI_GET"]]) + keys("/ap", "/ap"))
        assert recv_bytes(c) == b"".join(parts) and recv_bytes(c) == b"".join(parts)
        # One APPEND's own bytes past the limit: refused by the parser.
        c.sendall(bytes([V2["APPEND"]]) + s("/ap") + s(b"u" * 65537))
        assert closed_by_peer(c)
        c.close()
        d = connect(sv.port)
        d.sendall(bytes([V2["GET"]]) + s("/ap"))
        assert recv_bytes(d) == b"".join(parts)
        d.close()
    finally:
        assert sv.close() == 0


def test_multi_set_larger_than_the_buffer_limit_is_streamed():
    """20 x 8 MiB in one MULTI_SET is legal upstream (only the fields are
    limited). It used to close at a 32 MiB whole-message cap; it is now
    parsed pair by pair. Proof that it is never held whole: a buffer limit
    of 9 MiB (one pair fits, the 160 MiB message could not) accepts it."""
    sv = Server("--max-conn-buffer", str(9 << 20))
    try:
        vals = [bytes([i]) * (8 << 20) for i in range(20)]
        c = connect(sv.port, timeout=120)
        msg = [bytes([V2["MULTI_SET"]]) + i64(20)]
        for i, v in enumerate(vals):
            msg.append(s(f"/ms{i}") + s(v))
        for part in msg:
            c.sendall(part)
        for i in (0, 7, 19):
            c.sendall(bytes([V2["GET"]]) + s(f"/ms{i}"))
            assert recv_bytes(c) == vals[i]
        c.sendall(bytes([V2["GETNUMKEYS"]]))
        assert recv_i64(c) == 20
        c.close()
        assert "closing connection" not in sv.log()
    finally:
        assert sv.close() == 0
