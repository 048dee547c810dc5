"""Real PyTorch (every version torchroot.py finds: host 1.13, trixie 2.6, sid's
newest) against our store servers: every method the version's Python TCPStore
client has (detected with hasattr), against `ddpstore serve` and against
ddprun's agent store; gloo process groups rendezvousing through it (explicit
store=, and env:// with TORCHELASTIC_USE_AGENT_STORE as under torchrun); a
key space shared with the ddpstore CLI; and the stalled-client case that
freezes PyTorch's own (non-libuv) server but not ours.

Facts of the versions (measured here), beyond ../shared/reference:
- 1.13's client has set/get/add/compare_set/delete_key/num_keys/wait only;
  2.6 adds check/append/multi_get/multi_set (no queues, barrier, list_keys);
  2.14 adds barrier/list_keys/queue_push/queue_pop/queue_len and clone.
- 2.x's Debian build has no libuv: the tests' clients run with the use_libuv
  default fix (nolibuv/), and 2.14's queue methods then refuse on the client
  side ("not implemented on legacy TCPStore backend"), never reaching us.
- 2.x's init_process_group("env://") under an agent store puts no
  /worker/attempt_N prefix on its keys (1.13 does): see
  test_launch_torch's restart test."""
import importlib.util
import os
import select
import socket
import struct
import subprocess
import textwrap
import time

import pytest

# One worker runs the whole module (tests/run.sh: --dist loadgroup): its
# module-scoped fixture, once.
pytestmark = pytest.mark.xdist_group("test_store_torch")

_spec = importlib.util.spec_from_file_location(
    "storeutil", os.path.join(os.path.dirname(__file__), "..", "e2e", "storeutil.py"))
storeutil = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(storeutil)
Server, cli = storeutil.Server, storeutil.cli

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DDP_BUILD", os.path.join(REPO, "build"))
DDPRUN = os.path.join(BUILD, "bin", "ddprun")
# A key gloo's init writes through torchrun 1.x's PrefixStore("/worker/attempt_0").
KEY_UNDER_AGENT_STORE_1X = "/worker/attempt_0/default_pg/0/0/rank_1"

# Every client method of this version against the store at argv[1]:argv[2]
# (or MASTER_ADDR/MASTER_PORT); prints "ok" and the methods it used.
OPS = textwrap.dedent("""
    import os, sys, threading
    from datetime import timedelta
    import torch.distributed as dist
    host = sys.argv[1] if len(sys.argv) > 1 else os.environ["MASTER_ADDR"]
    port = int(sys.argv[2] if len(sys.argv) > 2 else os.environ["MASTER_PORT"])
    def client():
        return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=20))
    st = client()
    used = []
    def has(name):
        ok = hasattr(st, name)
        if ok:
            used.append(name)
        return ok
    p = "ops/%d/" % os.getpid()  # ours alone: the store may hold others' keys
    assert has("set") and has("get")
    st.set(p + "k", b"v")
    assert st.get(p + "k") == b"v"
    st.set(p + "k", "text")
    assert st.get(p + "k") == b"text"
    assert has("add")
    assert st.add(p + "ctr", 3) == 3 and st.add(p + "ctr", -1) == 2
    assert st.get(p + "ctr") == b"2"  # ADD keeps decimal text
    assert has("compare_set")
    assert st.compare_set(p + "cas", "", "first") == b"first"
    assert st.compare_set(p + "cas", "first", "second") == b"second"
    assert st.compare_set(p + "cas", "wrong", "third") == b"second"
    assert st.compare_set(p + "cas-missing", "exp", "des") == b"exp"
    assert has("num_keys") and has("delete_key")
    n = st.num_keys()
    assert st.delete_key(p + "k") is True
    assert st.delete_key(p + "k") is False
    assert st.num_keys() == n - 1
    if has("check"):
        assert st.check([p + "ctr"]) is True
        assert st.check([p + "ctr", p + "absent"]) is False
    if has("append"):
        st.append(p + "app", b"ab")
        st.append(p + "app", b"cd")
        assert st.get(p + "app") == b"abcd"
    if has("multi_set") and has("multi_get"):
        st.multi_set([p + "m1", p + "m2"], [b"one", b"two"])
        assert st.multi_get([p + "m2", p + "m1"]) == [b"two", b"one"]
    assert has("wait")
    st.wait([p + "ctr"])  # present: at once
    st.wait([p + "ctr"], timedelta(seconds=5))
    try:
        st.wait([p + "absent"], timedelta(seconds=0.3))
        raise AssertionError("wait on an absent key returned")
    except RuntimeError as e:  # 2.x: DistStoreError, a RuntimeError
        assert "imeout" in str(e), e
    # Without a timeout: parked until another client sets the key.
    other = client()
    t = threading.Timer(0.3, lambda: other.set(p + "later", b"x"))
    t.start()
    st.wait([p + "later"])
    t.join()
    assert st.get(p + "later") == b"x"
    if has("list_keys"):
        keys = set(st.list_keys())
        want = {p + k for k in ("ctr", "cas", "later")}
        assert want <= keys and p + "k" not in keys, keys
    if has("barrier"):
        # Three callers of a world of 3: the last releases the others.
        errs = []
        def arrive():
            try:
                client().barrier(p + "bar", 3, timedelta(seconds=20))
            except Exception as e:
                errs.append(e)
        ts = [threading.Thread(target=arrive) for _ in range(2)]
        [t.start() for t in ts]
        st.barrier(p + "bar", 3)
        [t.join(30) for t in ts]
        assert not errs and not any(t.is_alive() for t in ts), errs
        try:
            st.barrier(p + "bar-alone", 2, timedelta(seconds=0.3))
            raise AssertionError("barrier of 2 with one caller returned")
        except RuntimeError as e:
            assert "imeout" in str(e), e
        st.set(p + "after", b"1")  # the connection survived the cancel
        assert st.get(p + "after") == b"1"
    if has("queue_push"):
        # Debian's libuv-less build: the legacy client refuses queues itself.
        try:
            st.queue_push(p + "q", b"x")
        except Exception as e:
            assert "legacy" in str(e), e
        else:
            assert st.queue_len(p + "q") == 1 and st.queue_pop(p + "q") == b"x"
    print("ok", " ".join(used), flush=True)
""")


@pytest.fixture(scope="module")
def srv():
    sv = Server()
    yield sv
    assert sv.close() == 0


def methods_of(pt):
    """The TCPStore methods this version's client has."""
    r = pt.run(["-c", "import torch.distributed as d; print(' '.join(dir(d.TCPStore)))"])
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def check_ops(pt, out):
    lines = [l for l in out.splitlines() if l.startswith("ok")]
    assert len(lines) == 1, out
    used = set(lines[0].split()[1:])
    want = {"set", "get", "add", "compare_set", "delete_key", "num_keys", "wait", "check",
            "append", "multi_get", "multi_set", "barrier", "list_keys", "queue_push"}
    assert used == want & methods_of(pt)
    if pt.major >= 2:
        assert {"check", "append", "multi_get", "multi_set"} <= used
    return used


def test_tcpstore_client_operations_against_ddpstore(pt, srv):
    r = pt.run(["-c", OPS, "127.0.0.1", str(srv.port)], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    check_ops(pt, r.stdout)
    assert "unknown opcode" not in srv.log()


def test_tcpstore_client_operations_against_the_agent_store(pt, tmp_path):
    (tmp_path / "ops.py").write_text(OPS)
    env = pt.env(PYTHON_EXEC=pt.python)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    r = subprocess.run([DDPRUN, "--nproc-per-node=1", "ops.py"], cwd=tmp_path, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    check_ops(pt, r.stdout)


SHARED = textwrap.dedent("""
    import sys
    from datetime import timedelta
    import torch.distributed as dist
    st = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False,
                       timeout=timedelta(seconds=60))
    tag = sys.argv[2]
    st.set("from-python/" + tag, b"hello")
    print("ready", flush=True)
    st.wait(["from-shell/" + tag])
    print(st.get("from-shell/" + tag).decode(), flush=True)
""")


def test_key_space_shared_with_ddpstore_cli(pt, srv):
    p = pt.popen(["-c", SHARED, str(srv.port), pt.name], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 120)  # torch imports slowly
        assert ready and p.stdout.readline().strip() == "ready"
        r = cli(srv.addr, "get", "from-python/" + pt.name)
        assert r.returncode == 0 and r.stdout == b"hello"
        cli(srv.addr, "set", "from-shell/" + pt.name, "hi")
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.strip() == "hi"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


WORKER = textwrap.dedent("""
    import os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    rank, port, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if mode == "store":
        st = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
        dist.init_process_group("gloo", store=st, rank=rank, world_size=2,
                                timeout=timedelta(seconds=60))
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE="2", TORCHELASTIC_USE_AGENT_STORE="True",
                          TORCHELASTIC_RESTART_COUNT="0")
        dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
    t = torch.tensor([float(rank + 1)] * 4)
    dist.all_reduce(t)
    print(t.tolist(), flush=True)
    dist.destroy_process_group()
""")


@pytest.mark.parametrize("mode", ["store", "env-agent-store"])
def test_gloo_all_reduce_through_our_store(pt, mode):
    sv = Server()
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        procs = [pt.popen(["-c", WORKER, str(r), str(sv.port), mode], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env) for r in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
            assert out.strip() == "[3.0, 3.0, 3.0, 3.0]"
        if mode == "env-agent-store" and pt.major < 2:
            # torchrun 1.x's layout: PrefixStore("/worker/attempt_0") over
            # TCPStore; 2.x has no such prefix.
            assert cli(sv.addr, "check", KEY_UNDER_AGENT_STORE_1X).returncode == 0
    finally:
        assert sv.close() == 0


# This version's TCPStore client, once: "served", or "timeout" when the
# server did not answer within argv[2] seconds. The client runs in a thread
# bounded from outside: 2.x's client (2.6 and 2.14 alike) stays in its
# connect handshake past its own timeout when the server accepts but never
# answers (1.13 raises after the timeout), so the bound is a little past
# that timeout: the answer is "timeout" either way, 7 s sooner.
ONE_CLIENT = textwrap.dedent("""
    import os, sys, threading
    from datetime import timedelta
    import torch.distributed as dist
    t = float(sys.argv[2])
    said = []
    def use():
        try:
            st = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False,
                               timeout=timedelta(seconds=t))
            st.set("other", b"1")
            said.append("served" if st.get("other") == b"1" else "wrong")
        except RuntimeError:
            said.append("timeout")
    th = threading.Thread(target=use, daemon=True)
    th.start()
    th.join(t + 3)
    print(said[0] if said else "timeout", flush=True)
    os._exit(0)
""")

# PyTorch's own server (2.x: the legacy one, Debian has no libuv).
TORCH_SERVER = textwrap.dedent("""
    import time
    from datetime import timedelta
    import torch.distributed as dist
    st = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                       timeout=timedelta(seconds=60))
    print(st.port, flush=True)
    time.sleep(120)
""")


def _stall_then_use(pt, port, timeout_s):
    """Leave one raw client stalled mid-message, then use a TCPStore client:
    "served" or "timeout"."""
    stalled = socket.create_connection(("127.0.0.1", port))
    try:
        # 1.x: a SET with its key cut short. 2.x: VALIDATE, then the same.
        if pt.major >= 2:
            stalled.sendall(storeutil.VALIDATE)
            stalled.sendall(b"\x01" + struct.pack("<Q", 5) + b"/sta")
        else:
            stalled.sendall(b"\x00" + struct.pack("<Q", 5) + b"/sta")
        time.sleep(0.2)
        r = pt.run(["-c", ONE_CLIENT, str(port), str(timeout_s)], timeout=120)
        return r.stdout.strip()
    finally:
        stalled.close()


def test_stalled_client_freezes_torchs_own_server_but_not_ours(pt, srv):
    legacy = pt.popen(["-c", TORCH_SERVER], stdout=subprocess.PIPE, start_new_session=True)
    try:
        ready, _, _ = select.select([legacy.stdout], [], [], 120)
        assert ready, "the torch TCPStore server did not start"
        port = int(legacy.stdout.readline())
        # PyTorch's own server blocks in recv() on the stalled client...
        assert _stall_then_use(pt, port, timeout_s=2) == "timeout"
    finally:
        legacy.kill()
        legacy.wait(timeout=10)
    # ...ours serves the others meanwhile.
    assert _stall_then_use(pt, srv.port, timeout_s=10) == "served"


# The same requests against PyTorch's own server (argv[1] "torch": one in
# this process; 2.x: the legacy one, Debian has no libuv) or ours (a port):
# each line its result, so the two runs must print the same.
AS_TORCH = textwrap.dedent("""
    import sys
    from datetime import timedelta
    import torch.distributed as dist
    if sys.argv[1] == "torch":
        master = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60))
        port = master.port
    else:
        port = int(sys.argv[1])
    def client():
        return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    def show(name, fn):
        try:
            out = repr(fn())
        except Exception as e:
            out = "error " + type(e).__name__
        print(name, out, flush=True)
    c = client()
    for what in sys.argv[2:]:
        exec(what)
""")


def _same_as_torch(pt, *lines):
    """Run lines through AS_TORCH against PyTorch's server, then ours: both
    outputs, which the caller checks (the two must be equal)."""
    r = pt.run(["-c", AS_TORCH, "torch", *lines], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    sv = Server()
    try:
        o = pt.run(["-c", AS_TORCH, str(sv.port), *lines], timeout=300)
        assert o.returncode == 0, o.stderr[-3000:]
    finally:
        assert sv.close() == 0
    assert o.stdout == r.stdout, (r.stdout, o.stdout)
    return o.stdout.splitlines()


def test_add_wraps_around_past_int64_as_torchs_server(pt):
    """stoll(old) + delta in PyTorch's servers wraps (two's complement); ours
    closed the connection instead, which the client saw as an error."""
    out = _same_as_torch(
        pt, 'c.set("w", b"9223372036854775807")', 'show("max+1", lambda: c.add("w", 1))',
        'show("get", lambda: client().get("w"))', 'show("min-1", lambda: c.add("w", -1))',
        'show("get", lambda: client().get("w"))')
    assert out == ["max+1 -9223372036854775808", "get b'-9223372036854775808'",
                   "min-1 9223372036854775807", "get b'9223372036854775807'"]


def test_append_grows_a_value_past_8_mib_as_torchs_server(pt):
    """A value grows past the 8 MiB value limit by APPENDs (upstream's libuv
    server checks each APPEND's own bytes). Ours dropped such an APPEND and
    closed the connection, and the client, which gets no reply to APPEND,
    lost the data without a word."""
    if pt.major < 2:
        pytest.skip("PyTorch 1.x's client has no append")
    out = _same_as_torch(
        pt, 'V = b"\\0x" * (4 << 20)', 'c.set("a", V)', 'c.append("a", b"z")',
        'c.append("a", V)', 'c.append("a", V)',
        'show("len", lambda: len(client().get("a")))',
        'show("tail", lambda: client().get("a")[-3:])')
    assert out == ["len 25165825", "tail b'x\\x00x'"]


def test_multi_get_of_64_mib_as_torchs_server(pt):
    """8 values of 8 MiB in one multi_get pass the 64 MiB buffer limit of a
    connection; PyTorch's servers cap no reply, and ours closed the
    connection."""
    if pt.major < 2:
        pytest.skip("PyTorch 1.x's client has no multi_get")
    out = _same_as_torch(
        pt, 'ks = ["m%d" % i for i in range(8)]',
        'c.multi_set(ks, [bytes([i]) * (8 << 20) for i in range(8)])',
        'show("lens", lambda: [len(v) for v in client().multi_get(ks)])',
        'show("firsts", lambda: [v[0] for v in c.multi_get(ks)])')
    assert out == ["lens %r" % ([8 << 20] * 8), "firsts %r" % list(range(8))]


def test_ddpstore_cli_says_what_a_torch_server_lacks(pt):
    """The CLI, a 2.x-dialect client, against PyTorch's own servers: 1.13's
    drops the handshake (it reads a SET of a 1 GB key), and the CLI blamed a
    connection limit; 2.6's closes on LIST_KEYS and BARRIER, which it does
    not know, and the CLI said only that the connection was closed."""
    legacy = pt.popen(["-c", TORCH_SERVER], stdout=subprocess.PIPE, start_new_session=True)
    try:
        ready, _, _ = select.select([legacy.stdout], [], [], 120)
        assert ready, "the torch TCPStore server did not start"
        addr = "127.0.0.1:" + legacy.stdout.readline().strip()
        base = ("--timeout", "10", "--connect-timeout", "10")
        if pt.major < 2:
            r = cli(addr, *base, "ping", text=True)
            assert r.returncode == storeutil.CONN and r.stderr.count("\n") == 1, r.stderr
            assert "a PyTorch 1.x server, whose dialect ddpstore does not speak" in r.stderr
            assert "at its connection limit" in r.stderr
            return
        if "list_keys" in methods_of(pt):
            pytest.skip("this PyTorch's server knows LIST_KEYS and BARRIER")
        assert cli(addr, *base, "set", "k", "v").returncode == storeutil.OK
        for args, op in ((("keys",), "LIST_KEYS"), (("barrier", "b", "1"), "BARRIER")):
            r = cli(addr, *base, *args, text=True)
            assert r.returncode == storeutil.CONN and r.stderr.count("\n") == 1, r.stderr
            assert (f"{args[0]}: the server closed the connection on {op}: it may not "
                    "support that operation" in r.stderr), r.stderr
    finally:
        legacy.kill()
        legacy.wait(timeout=10)
