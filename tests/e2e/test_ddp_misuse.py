"""libddp's API used in ways its contract allows, under ddprun with several
ranks (tests/progs/ddp_misuse.c; the world-of-one cases are unit tests in
tests/unit/test_ddp_api.c): each call gets its documented result, never a
crash, a sanitizer report or a misleading error. Every wait is bounded; no
timing is asserted."""
import os

from conftest import binary, prog, run


def ddprun(nproc, args, timeout=90, **env):
    return run([binary("ddprun"), f"--nproc-per-node={nproc}", prog("ddp_misuse")] + args,
               timeout=timeout, env=dict(os.environ, DDP_QUIET="1", DDP_BACKEND="cpu",
                                         DDP_TIMEOUT="30", **env))


def test_a_second_context_after_finalize_joins_again():
    """ddp_init after ddp_finalize, on every rank: the second join found the
    first one's records at the store and failed with DDP_EENV, "rank 1 was
    started twice (pid P on h, pid P on h)", the same pid twice."""
    r = ddprun(2, ["reinit", "3"])
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(3):
        assert r.stderr.count(f"round {i} sum 1\n") == 2, r.stderr
    assert r.stderr.count("ok\n") == 2, r.stderr


def test_zero_sized_collectives_take_null_buffers():
    """0 elements with NULL buffers is valid: memcpy(NULL, ..., 0) inside was
    undefined behaviour (UBSan stopped a SAN=1 build)."""
    for n in (1, 2):
        r = ddprun(n, ["zero"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stderr.count("ok\n") == n, r.stderr
        assert "runtime error" not in r.stderr


def test_freeing_a_shared_block_twice_is_refused():
    """The second ddp_free of a block the node's ranks share went to free() of
    unmapped memory (SIGSEGV or glibc's abort)."""
    r = ddprun(2, ["dfree"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count("ok\n") == 2, r.stderr
    assert r.stderr.count("is not a block of this context's ddp_alloc") == 2, r.stderr


def test_print_force_without_a_context_reaches_stdout_on_every_rank():
    """ddp_print_force(NULL, ...) is "printf to the real stdout from any
    rank": on a silenced rank it went to /dev/null like printf."""
    r = ddprun(3, ["printnull"])
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(3):
        assert f"force-null {rank}\n" in r.stdout, r.stdout
    assert "printf 0\n" in r.stdout and "printf 1" not in r.stdout, r.stdout


def test_bucket_caps_that_differ_fail_create_on_every_rank():
    """The last rank gives another first bucket cap: its buckets differ.
    That surfaced only in the first finish, as a mismatched bucket
    all_reduce; now create fails on every rank naming a rank that differs,
    and the context still works."""
    r = ddprun(3, ["caps"])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if l.startswith("create: ")]
    assert len(lines) == 3, r.stderr
    assert all("made different buckets" in l and "every rank must give the same "
               "first_bucket_bytes and bucket_bytes" in l for l in lines), lines
    assert sum("rank 2 made different buckets (2)" in l for l in lines) == 2, lines
    assert r.stderr.count("ok\n") == 3, r.stderr


def test_ddp_alloc_fails_where_malloc_does():
    """Twice RAM and swap: malloc says no, and ddp_alloc returned a pointer
    (a memfd's pages are charged only once touched), which would have ended
    in SIGBUS or the OOM killer when used. (Under a sanitizer malloc may say
    yes: then the two need only agree.)"""
    # A sanitizer's malloc aborts instead of returning NULL unless told.
    asan = os.environ.get("ASAN_OPTIONS", "")
    r = ddprun(2, ["bigalloc"],
               ASAN_OPTIONS=(asan + ":" if asan else "") + "allocator_may_return_null=1")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if l.startswith("malloc ")]
    assert len(lines) == 2, r.stderr
    for l in lines:
        m, d = l.split()[1], l.split()[3]
        assert m == d, l
        assert m == "1" or "ddp_alloc: cannot allocate" in l, l


def test_a_forked_child_cannot_use_the_parents_context():
    """fork() after ddp_init: the child's all_reduce joined the parents' (their
    sums came out wrong, status 0), and its ddp_finalize made the parents
    fail, "rank 0 finished (ddp_finalize)". Now the child's calls are
    refused, naming the fork, and the parents go on untouched."""
    for what in ("coll", "fin"):
        r = ddprun(2, ["fork", what])
        assert r.returncode == 0, r.stdout + r.stderr
        for rank in range(2):
            assert r.stderr.count(f"parent {rank} sum 2\n") == 3, r.stderr
            line = [l for l in r.stderr.splitlines() if l.startswith(f"child {rank} rc ")]
            assert len(line) == 1, r.stderr
            assert line[0].startswith(f"child {rank} rc -22 "), line
            assert "used in a forked child (pid " in line[0], line
            assert "of the process that ran ddp_init (pid " in line[0], line
        assert r.stderr.count("ok\n") == 2, r.stderr
