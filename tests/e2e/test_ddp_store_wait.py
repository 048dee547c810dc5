"""ddp_init waiting for a store that does not answer: no silent wait. For its
first 5 s a rank keeps trying in silence (the agent's store may come up after
the workers); past that it says once on stderr which store it waits for, why,
and for how long still, then keeps trying until the init timeout. A store that
comes up late, before or after that notice, is joined as usual. No assertion
here is on a duration: the store is started either well within the quiet 5 s
or once the notice was seen."""
import re
import socket
import subprocess
import threading
import time
import uuid

from conftest import binary, free_port, prog
from ddp_launch import launch, wait_all

NOTICE = re.compile(
    r"^\[rank0\] libddp: the store at 127\.0\.0\.1:(\d+) \(MASTER_ADDR:MASTER_PORT\) does "
    r"not answer yet: (.+); still trying for [0-9.]+ s \(DDP_TIMEOUT sets how long; "
    r"DDP_STORE=0 runs one node without a store\)$")


def notices(err):
    return [m for m in map(NOTICE.match, err.splitlines()) if m]


def start_rank(reaper, port, timeout):
    """One launched rank (ddp_hello) whose store is at 127.0.0.1:port, with its
    stderr collected line by line as it comes (lines)."""
    p = launch(reaper, [prog("ddp_hello")], 1, port, "w" + uuid.uuid4().hex[:10],
               extra={"DDP_TIMEOUT": str(timeout)})[0]
    lines = []
    reader = threading.Thread(target=lambda: [lines.append(l) for l in p.stderr], daemon=True)
    reader.start()
    return p, lines, reader


def finish(p, reader, lines, timeout=60):
    """(returncode, stdout, stderr) once the rank exits (killed at the deadline)."""
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=10)
    reader.join(timeout=10)
    return p.returncode, p.stdout.read(), "".join(lines)


def serve(reaper, port):
    reaper.popen([binary("ddpstore"), "serve", "--host", "127.0.0.1", "--port", str(port),
                  "--quiet"])


def test_a_store_that_never_answers_is_named_once_then_the_init_fails(reaper):
    port = free_port()  # nothing listens there
    rc, out, err = wait_all(launch(reaper, [prog("ddp_hello")], 1, port,
                                   "w" + uuid.uuid4().hex[:10],
                                   extra={"DDP_TIMEOUT": "7"}), timeout=60)[0]
    found = notices(err)
    assert len(found) == 1, err
    assert found[0].group(1) == str(port)
    assert found[0].group(2) == "connection refused (nothing listens at that address)"
    assert rc == 1, err
    assert (f"ddp_init: cannot reach the store at 127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) "
            "within 7 s: connection refused (nothing listens at that address)") in err, err
    # the notice comes first, the failure last
    lines = err.splitlines()
    assert lines.index(found[0].string) < len(lines) - 1


def test_a_store_up_within_the_quiet_time_is_joined_without_a_notice(reaper):
    port = free_port()
    p, lines, reader = start_rank(reaper, port, 60)
    time.sleep(1.5)  # well within the 5 s of silence
    serve(reaper, port)
    rc, out, err = finish(p, reader, lines)
    assert rc == 0, err
    assert notices(err) == [], err
    assert "does not answer yet" not in err


def test_a_store_up_after_the_notice_is_joined(reaper):
    port = free_port()
    p, lines, reader = start_rank(reaper, port, 60)
    deadline = time.monotonic() + 30
    while not notices("".join(lines)) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(notices("".join(lines))) == 1, "".join(lines)
    serve(reaper, port)
    rc, out, err = finish(p, reader, lines)
    assert rc == 0, err
    assert len(notices(err)) == 1, err
    assert "cannot reach the store" not in err


def test_a_store_that_refused_then_stops_answering_is_reported_as_not_answering(reaper):
    """The failure names what the address did last: refused (nothing listened)
    until the notice, then silence (a listener whose queue is full, where the
    kernel drops new connections), for the rest of the timeout. Until
    2026-12-04 the old refusal was reported."""
    port = free_port()
    p, lines, reader = start_rank(reaper, port, 14)
    deadline = time.monotonic() + 30
    while not notices("".join(lines)) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m.group(2) for m in notices("".join(lines))] == [
        "connection refused (nothing listens at that address)"], "".join(lines)
    full = socket.socket()
    full.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    full.bind(("127.0.0.1", port))
    full.listen(0)  # one connection waits to be accepted; the next gets no answer
    try:
        # Should the rank's next try come first and take the place, it gets
        # no answer either: the listener never accepts nor answers.
        filler = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        filler = None
    try:
        rc, out, err = finish(p, reader, lines)
    finally:
        if filler:
            filler.close()
        full.close()
    assert rc == 1, err
    assert (f"ddp_init: cannot reach the store at 127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) "
            "within 14 s: no answer (the host is down, a firewall drops the connection, "
            "or the server there does not answer)") in err, err
