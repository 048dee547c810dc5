"""Real PyTorch (Debian python3-torch 1.13) against our store server: the
TCPStore client's operations, gloo process groups rendezvousing through it
(explicit store=, and env:// with TORCHELASTIC_USE_AGENT_STORE as under
torchrun), a shared key space with the ddpstore CLI, and the stalled-client
case that freezes PyTorch 1.13's own server but not ours."""
import importlib.util
import os
import socket
import struct
import subprocess
import textwrap
import threading
import time
from datetime import timedelta

import pytest

_spec = importlib.util.spec_from_file_location(
    "storeutil", os.path.join(os.path.dirname(__file__), "..", "e2e", "storeutil.py"))
storeutil = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(storeutil)
Server, cli, s = storeutil.Server, storeutil.cli, storeutil.s

import torch.distributed as dist  # noqa: E402  (Debian's python3-torch)

PY = "/usr/bin/python3"
# A key gloo's init writes through torchrun's PrefixStore("/worker/attempt_0").
KEY_UNDER_AGENT_STORE = "/worker/attempt_0/default_pg/0/0/rank_1"


@pytest.fixture(scope="module")
def srv():
    sv = Server()
    yield sv
    assert sv.close() == 0


def client(port, timeout=10):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=timeout))


def test_tcpstore_client_operations(srv):
    st = client(srv.port)
    st.set("k", b"v")
    assert st.get("k") == b"v"
    assert st.add("ctr", 3) == 3 and st.add("ctr", -1) == 2
    assert st.get("ctr") == b"2"  # ADD keeps decimal text
    assert st.compare_set("cas", "", "first") == b"first"
    assert st.compare_set("cas", "first", "second") == b"second"
    assert st.compare_set("cas", "wrong", "third") == b"second"
    assert st.compare_set("cas-missing", "exp", "des") == b"exp"
    n = st.num_keys()
    assert st.delete_key("k") is True
    assert st.delete_key("k") is False
    assert st.num_keys() == n - 1


def test_wait_with_and_without_timeout(srv):
    st = client(srv.port)
    st.set("ready", b"1")
    st.wait(["ready"])  # present: returns at once
    with pytest.raises(RuntimeError, match="[Tt]imeout"):
        st.wait(["absent"], timedelta(seconds=0.3))
    # Without a timeout argument: parked until another client sets the key.
    st2 = client(srv.port)
    t = threading.Timer(0.3, lambda: cli(srv.addr, "set", "later", "x"))
    t.start()
    st2.wait(["later"])
    t.join()
    assert st2.get("later") == b"x"


def test_key_space_shared_with_ddpstore_cli(srv):
    st = client(srv.port)
    st.set("from-python", b"hello")
    r = cli(srv.addr, "get", "from-python")
    assert r.returncode == 0 and r.stdout == b"hello"
    cli(srv.addr, "set", "from-shell", "hi")
    assert st.get("from-shell") == b"hi"


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
def test_gloo_all_reduce_through_our_store(mode):
    sv = Server()
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        procs = [subprocess.Popen([PY, "-c", WORKER, str(r), str(sv.port), mode],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env) for r in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
            assert out.strip() == "[3.0, 3.0, 3.0, 3.0]"
        if mode == "env-agent-store":
            # torchrun's layout: PrefixStore("/worker/attempt_0") over TCPStore.
            assert cli(sv.addr, "check", KEY_UNDER_AGENT_STORE).returncode == 0
    finally:
        assert sv.close() == 0


def _stall_then_use(port, timeout_s):
    """Leave one raw client stalled mid-SET, then use a TCPStore client.
    Returns True if the other client was served, False if it timed out."""
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"\x00" + struct.pack("<Q", 5) + b"/sta")  # 1.x SET, key cut short
    time.sleep(0.2)
    try:
        st = client(port, timeout=timeout_s)
        st.set("other", b"1")
        return st.get("other") == b"1"
    except RuntimeError:
        return False
    finally:
        stalled.close()


def test_stalled_client_freezes_torch_113_server_but_not_ours(srv):
    legacy = subprocess.Popen(
        [PY, "-c", textwrap.dedent("""
            import sys, time
            from datetime import timedelta
            import torch.distributed as dist
            st = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                               timeout=timedelta(seconds=60))
            print(st.port, flush=True)
            time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        port = int(legacy.stdout.readline())
        # PyTorch's own server blocks in recv() on the stalled client...
        assert _stall_then_use(port, timeout_s=2) is False
    finally:
        legacy.kill()
        legacy.wait(timeout=10)
    # ...ours serves the others meanwhile.
    assert _stall_then_use(srv.port, timeout_s=10) is True
