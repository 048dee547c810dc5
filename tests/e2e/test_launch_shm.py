"""No shared memory is left behind by a job: when every local rank dies during
ddp_init before all have attached to the node's segment (so libddp could not
unlink it), ddprun removes it once the attempt's workers have exited, before
a restart and at the end. It knows its own by the nonce it gives its workers
(DDP_SHM_NONCE, the end of the segment's name): another job's segment stays,
even one with the same run id and port, as does one made without ddprun."""
import os
import uuid

from conftest import binary, free_port, prog, run
from mnutil import clean_env

# Local rank 0 creates the node's segment in ddp_init and waits for local rank
# 1, which dies once it sees the segment (ddprun then stops rank 0 with
# SIGTERM: nobody unlinks). Attempt 1 lists /dev/shm and succeeds.
SCRIPT = r'''
echo "$DDP_SHM_NONCE" > "$OUT/nonce.$LOCAL_RANK.$TORCHELASTIC_RESTART_COUNT"
if [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]; then ls /dev/shm > "$OUT/shm.1.$LOCAL_RANK"; exit 0; fi
if [ "$LOCAL_RANK" = 0 ]; then exec "$COLL" check; fi
i=0
while [ $i -lt 1500 ] && ! ls /dev/shm | grep -q -- "-a$DDP_SHM_NONCE\$"; do
    sleep 0.02; i=$((i + 1))
done
ls /dev/shm > "$OUT/shm.0"
exit 5
'''


def test_segments_of_workers_that_died_in_init_are_removed(tmp_path):
    rid = "sweep" + uuid.uuid4().hex[:8]
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    uid = os.getuid()
    # Another job's, same run id and port (another ddprun: another nonce), and
    # one made without ddprun (no nonce).
    others = [f"ddp-{rid}-r0-p{port}-n0-u{uid}-a00000000deadbeef",
              f"ddp-{rid}-r0-p{port}-n0-u{uid}"]
    for name in others:
        with open(f"/dev/shm/{name}", "w") as f:
            f.write("not yours")
    try:
        r = run([binary("ddprun"), "--nproc-per-node", "2", "--rdzv-id", rid, "--master-port",
                 str(port), "--max-restarts", "1", "--shutdown-timeout", "30",
                 "sh", "-c", SCRIPT], timeout=120,
                env=clean_env(OUT=str(out), COLL=prog("ddp_coll"), DDP_STORE="0",
                              DDP_BACKEND="cpu", DDP_QUIET="1", DDP_TIMEOUT="600"))
        assert r.returncode == 0, r.stderr
        nonce = (out / "nonce.0.0").read_text().strip()
        # one nonce per ddprun: every worker of every attempt has it
        assert len(nonce) == 16 and int(nonce, 16) >= 0
        assert {(out / f"nonce.{lr}.{a}").read_text().strip()
                for lr in (0, 1) for a in (0, 1)} == {nonce}
        ours = f"ddp-{rid}-r0-p{port}-n0-u{uid}-a{nonce}"
        # the segment was there when the last local rank died...
        assert ours in (out / "shm.0").read_text().split()
        # ...ddprun removed it before the restart, and says so
        assert f"ddprun: removed /dev/shm/{ours}, left behind by this node's workers" \
            in r.stderr
        for lr in (0, 1):
            listing = (out / f"shm.1.{lr}").read_text().split()
            assert ours not in listing
            assert set(others) <= set(listing)
        # nothing of this job remains; the others' are untouched
        assert sorted(n for n in os.listdir("/dev/shm") if rid in n) == sorted(others)
        for name in others:
            with open(f"/dev/shm/{name}") as f:
                assert f.read() == "not yours"
    finally:
        for name in os.listdir("/dev/shm"):
            if rid in name:
                os.unlink(f"/dev/shm/{name}")


def test_a_healthy_job_leaves_nothing_and_removes_nothing():
    rid = "sweepok" + uuid.uuid4().hex[:8]
    r = run([binary("ddprun"), "--nproc-per-node", "2", "--rdzv-id", rid, prog("ddp_coll"),
             "check"], timeout=120, env=clean_env(DDP_BACKEND="cpu", DDP_QUIET="1"))
    assert r.returncode == 0, r.stderr
    assert "removed /dev/shm" not in r.stderr
    assert [n for n in os.listdir("/dev/shm") if rid in n] == []
