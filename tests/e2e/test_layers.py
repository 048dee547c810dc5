"""The layering holds in the build: each part is compiled with only its own and
lower parts' include paths (rendezvous/ at the bottom; launcher/, libddp and
ddpstore above it, never on each other; examples, test programs and benches see
ddp.h only), so an include the wrong way fails to compile; and a unit test links
only its part's objects and those below. The flags come from the Makefile
(make print-cflags FILE=...); each probe is one small compile, nothing is built."""
import os
import re
import shlex

import pytest

from conftest import BUILD, REPO, make_vars, run


def make(*args, b=BUILD):
    r = run(["make", "-s", "--no-print-directory", "-C", REPO, f"B={b}", *make_vars(), *args],
            timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def cflags(source):
    """The flags the compile rule gives a source file at this path."""
    out = make("print-cflags", f"FILE={source}")
    return shlex.split(out)


def compile_probe(tmp_path, source, header):
    """Compile, from the repository root as make does, a file that includes
    header with the flags of a file at source. The probe itself lies in
    tmp_path, so only the include paths can find header."""
    probe = tmp_path / "layer_probe.c"
    probe.write_text(f'#include "{header}"\nint layer_probe(void);\n'
                     "int layer_probe(void) { return 0; }\n")
    cc = os.environ.get("CC", "cc")
    return run([cc, *cflags(source), "-c", str(probe), "-o", str(tmp_path / "layer_probe.o")],
               cwd=REPO, timeout=120)


# (where the including file is, a header of a higher or sibling part)
WRONG_WAY = [
    ("rendezvous/x.c", "agent.h"),                  # the bottom, of the launcher
    ("rendezvous/x.c", "ddp_internal.h"),           # the bottom, of libddp
    ("rendezvous/x.c", "ddp.h"),
    ("rendezvous/cli/x.c", "agent.h"),              # ddpstore, of the launcher
    ("launcher/x.c", "ddp_internal.h"),             # the launcher, of libddp
    ("launcher/x.c", "progress.h"),
    ("worker-runtime/src/x.c", "agent.h"),          # libddp, of the launcher
    ("worker-runtime/src/x.c", "report.h"),
    ("tests/unit/test_ddp_x.c", "agent.h"),         # a part's unit tests, likewise
    ("tests/unit/test_launch_x.c", "ddp_internal.h"),
    ("tests/unit/test_store_x.c", "agent.h"),
    ("tests/unit/test_x.c", "ddp_internal.h"),      # any other name: rendezvous/'s
    ("tests/fuzz/fuzz_launch_x.c", "ddp_internal.h"),  # fuzz targets go by name too
    ("tests/fuzz/fuzz_ddp_x.c", "agent.h"),
    ("tests/fuzz/fuzz_x.c", "agent.h"),
    ("examples/x.c", "ddp_internal.h"),             # a libddp program, of its internals
    ("tests/progs/x.c", "store_client.h"),
    ("bench/allreduce/x.c", "util.h"),
]

# The same parts, including their own and lower parts' headers: the probe
# would not tell a wrong way from a broken one without these.
RIGHT_WAY = [
    ("rendezvous/x.c", "util.h"),
    ("rendezvous/cli/x.c", "store_proto.h"),
    ("launcher/x.c", "agent.h"),
    ("launcher/x.c", "progress_slot.h"),
    ("worker-runtime/src/x.c", "ddp_internal.h"),
    ("worker-runtime/src/x.c", "store_client.h"),
    ("tests/unit/test_ddp_x.c", "ddp_internal.h"),
    ("tests/unit/test_launch_x.c", "agent.h"),
    ("tests/unit/test_slurm.c", "slurm.h"),
    ("tests/unit/test_store_x.c", "store_proto.h"),
    ("tests/fuzz/fuzz_launch_x.c", "slurm.h"),
    ("tests/fuzz/fuzz_ddp_x.c", "join.h"),
    ("tests/fuzz/fuzz_x.c", "rdzv_msg.h"),
    ("tests/progs/ddp_hello.c", "store_client.h"),  # PROG_INTERNAL: libddp's view
    ("examples/x.c", "ddp.h"),
]


@pytest.mark.parametrize("source,header", WRONG_WAY)
def test_an_include_the_wrong_way_fails_to_compile(tmp_path, source, header):
    r = compile_probe(tmp_path, source, header)
    assert r.returncode != 0, f"{source} could include {header}"
    assert re.search(rf"{re.escape(header)}: No such file", r.stderr), r.stderr


@pytest.mark.parametrize("source,header", RIGHT_WAY)
def test_an_include_of_its_own_or_a_lower_part_compiles(tmp_path, source, header):
    r = compile_probe(tmp_path, source, header)
    assert r.returncode == 0, r.stderr


def link_lines(tmp_path, goals):
    """{program: the objects its link line names}, from make -n in an empty
    build directory (so every rule is listed, and nothing runs)."""
    b = str(tmp_path / "b")
    r = run(["make", "-n", "--no-print-directory", "-C", REPO, f"B={b}", *make_vars(),
             *[f"{b}/{g}" for g in goals]], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    links = {}
    for line in r.stdout.splitlines():
        m = re.search(rf" -o {re.escape(b)}/(\S+) ", line)
        if m and m[1] in goals:
            objs = re.findall(rf"{re.escape(b)}/obj/(\S+\.o)", line)
            links[m[1]] = objs
    assert set(links) == set(goals), r.stdout
    return links


def parts(objs):
    """The parts whose objects a link takes (its own object aside)."""
    out = set()
    for o in objs:
        if o.startswith("tests/unit/"):
            continue
        out.add("worker-runtime" if o.startswith("worker-runtime/") else o.split("/")[0])
    return out


def test_unit_tests_link_only_their_part_and_those_below(tmp_path):
    names = sorted(f[:-2] for f in os.listdir(os.path.join(REPO, "tests", "unit"))
                   if f.startswith("test_") and f.endswith(".c"))
    links = link_lines(tmp_path, [f"tests/unit/{n}" for n in names])
    for goal, objs in links.items():
        n = os.path.basename(goal)
        if n.startswith("test_launch_") or n == "test_slurm":
            assert parts(objs) == {"launcher", "rendezvous"}, (n, objs)
        elif n.startswith("test_ddp_"):
            assert parts(objs) == {"worker-runtime", "rendezvous"}, (n, objs)
        else:
            assert parts(objs) == {"rendezvous"}, (n, objs)
    # libddp's tests take of rendezvous/ only what libddp holds (its client),
    # but test_ddp_join, which runs a store server for its ranks.
    assert "rendezvous/store_server.o" not in links["tests/unit/test_ddp_env"]
    assert "rendezvous/store_server.o" in links["tests/unit/test_ddp_join"]
