"""make install puts binaries, libddp (static and shared), ddp.h, ddp.pc and the
man pages under DESTDIR/PREFIX; pkg-config then builds a C program against the
installed library (shared and static), and make uninstall removes it all."""
import os

import pytest

from conftest import BUILD, REPO, make_vars, run

# One worker runs the whole module (tests/run.sh: --dist loadgroup): its
# module-scoped fixture, once.
pytestmark = pytest.mark.xdist_group("test_install")

PREFIX = "/usr/local"

PROGRAM = r"""
#include <stdio.h>
#include <ddp.h>

int main(void)
{
	struct ddp_ctx *ctx;
	double x;

	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "%s\n", ddp_errmsg());
		return 1;
	}
	x = 20.5 + ddp_rank(ctx) + ddp_world_size(ctx);
	if (ddp_all_reduce(ctx, &x, 1, DDP_FLOAT64, DDP_SUM) < 0) {
		fprintf(stderr, "%s\n", ddp_errmsg());
		return 1;
	}
	printf("x=%g backend=%s\n", x, ddp_backend_name(ddp_backend(ctx)));
	return ddp_finalize(ctx) < 0;
}
"""

INSTALLED = [
    "bin/ddprun", "bin/ddpstore", "lib/libddp.a", "lib/libddp.so", "lib/libddp.so.0",
    "include/ddp.h", "lib/pkgconfig/ddp.pc", "share/man/man1/ddprun.1",
    "share/man/man1/ddpstore.1", "share/man/man3/libddp.3",
]


def make(*goals, destdir):
    cmd = ["make", "--no-print-directory", "-C", REPO, f"B={BUILD}", f"PREFIX={PREFIX}",
           f"DESTDIR={destdir}", *make_vars(), *goals]
    r = run(cmd, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def destdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("destdir")
    make("install", destdir=d)
    return d


def pkg_config(destdir, *args):
    # The staged tree stands in for PREFIX (a sysroot would also prefix the
    # toolkit's absolute -L paths in Libs.private).
    env = dict(os.environ, PKG_CONFIG_PATH=f"{destdir}{PREFIX}/lib/pkgconfig")
    r = run(["pkg-config", f"--define-variable=prefix={destdir}{PREFIX}", *args, "ddp"],
            env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def san_flags():
    return ["-fsanitize=address,undefined"] if "SAN=1" in make_vars() else []


def test_every_file_is_installed(destdir):
    root = f"{destdir}{PREFIX}"
    missing = [f for f in INSTALLED if not os.path.exists(os.path.join(root, f))]
    assert missing == []
    assert os.access(os.path.join(root, "bin/ddprun"), os.X_OK)
    assert os.path.islink(os.path.join(root, "lib/libddp.so"))


def test_pkg_config_names_the_installed_prefix(destdir):
    cflags = pkg_config(destdir, "--cflags")
    libs = pkg_config(destdir, "--libs")
    assert f"-I{destdir}{PREFIX}/include" in cflags
    assert f"-L{destdir}{PREFIX}/lib" in libs and "-lddp" in libs


def build_program(destdir, tmp_path, source, linkage):
    """Compile source against the installed libddp (shared or static), as a user would."""
    src = tmp_path / "hello.c"
    src.write_text(source)
    exe = tmp_path / "hello"
    if linkage == "shared":
        libs = pkg_config(destdir, "--libs")
    else:
        # The archive by path, then what it needs (Libs.private).
        libs = [f"{destdir}{PREFIX}/lib/libddp.a"] + [
            f for f in pkg_config(destdir, "--libs", "--static") if f != "-lddp"]
    r = run(["cc", "-std=gnu11", "-Wall", "-Werror", *san_flags(), str(src), "-o", str(exe),
             *pkg_config(destdir, "--cflags"), *libs])
    assert r.returncode == 0, r.stderr
    return exe


def run_alone(exe, destdir):
    """Run exe as a single process outside any launcher (no rank variables)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["LD_LIBRARY_PATH"] = f"{destdir}{PREFIX}/lib"
    return run([str(exe)], env=env)


@pytest.mark.parametrize("linkage", ["shared", "static"])
def test_program_builds_and_runs_against_the_installed_library(destdir, tmp_path, linkage):
    exe = build_program(destdir, tmp_path, PROGRAM, linkage)
    r = run_alone(exe, destdir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("x=21.5 backend=cpu"), r.stdout
    needed = run(["readelf", "-d", str(exe)]).stdout
    assert ("libddp.so" in needed) == (linkage == "shared")


# A program whose own functions share names with libddp's internals (with
# other signatures): linked with either library, its calls reach its own
# definitions and libddp's reach libddp's.
CLASHING_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <ddp.h>

int store_set(const char *key);
double util_now_ms(int scale);
int store_parse(void);

int store_set(const char *key) { return (int)strlen(key) + 100; }
double util_now_ms(int scale) { return 0.5 * scale; }
int store_parse(void) { return -7; }

int main(void)
{
	struct ddp_ctx *ctx;
	double x = 1.5;

	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "%s\n", ddp_errmsg());
		return 1;
	}
	if (ddp_all_reduce(ctx, &x, 1, DDP_FLOAT64, DDP_SUM) < 0) {
		fprintf(stderr, "%s\n", ddp_errmsg());
		return 1;
	}
	printf("x=%g own=%d,%g,%d\n", x, store_set("abc"), util_now_ms(3), store_parse());
	return ddp_finalize(ctx) < 0;
}
"""


@pytest.mark.parametrize("linkage", ["shared", "static"])
def test_program_with_names_like_libddp_internals_links_and_runs(destdir, tmp_path, linkage):
    exe = build_program(destdir, tmp_path, CLASHING_PROGRAM, linkage)
    r = run_alone(exe, destdir)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "x=1.5 own=103,1.5,-7\n", r.stdout


@pytest.mark.parametrize("compiler", [["cc", "-std=c89"], ["cc", "-std=c99"],
                                      ["c++", "-std=c++98", "-x", "c++"],
                                      ["c++", "-std=c++11", "-x", "c++"]])
def test_the_installed_header_is_clean_under_pedantic_old_standards(destdir, tmp_path,
                                                                     compiler):
    """ddp.h under -std=c89 -pedantic or C++98 -pedantic: "comma at end of
    enumerator list" (a C99 and C++11 feature) in five enums."""
    src = tmp_path / "hdr.c"
    src.write_text("#include <ddp.h>\nint main(void)\n{\n\tstruct ddp_ctx *c = 0;\n"
                   "\t(void)c;\n\treturn (int)ddp_dtype_size(DDP_FLOAT32) - 4;\n}\n")
    r = run([*compiler, "-pedantic-errors", "-Wall", "-Wextra", "-Werror", "-c", str(src),
             "-o", str(tmp_path / "hdr.o"), *pkg_config(destdir, "--cflags")])
    assert r.returncode == 0, r.stderr


def test_the_static_library_exports_only_the_public_api(destdir):
    lib = os.path.join(f"{destdir}{PREFIX}", "lib", "libddp.a")
    out = run(["nm", "-g", "--defined-only", lib]).stdout
    names = [line.split()[-1] for line in out.splitlines() if len(line.split()) == 3]
    assert "ddp_init" in names and "ddp_all_reduce" in names
    assert [n for n in names if not n.startswith("ddp_")] == []


def test_the_shared_library_exports_only_the_public_api(tmp_path):
    # The store client and helpers linked into libddp.so stay local: a
    # program's own util_now_ms or store_set must not clash with them.
    make("install", destdir=tmp_path)
    lib = os.path.join(f"{tmp_path}{PREFIX}", "lib", "libddp.so.0")
    out = run(["nm", "-D", "--defined-only", lib]).stdout
    names = [line.split()[-1].split("@")[0] for line in out.splitlines()
             if line.split()[1] != "A"]
    assert "ddp_init" in names and "ddp_all_reduce" in names
    assert [n for n in names if not n.startswith("ddp_")] == []


def test_uninstall_removes_everything(tmp_path):
    make("install", destdir=tmp_path)
    make("uninstall", destdir=tmp_path)
    left = [os.path.join(dp, f) for dp, _, fs in os.walk(tmp_path) for f in fs]
    assert left == []


def test_program_links_inside_the_source_tree_as_libddp_3_says(tmp_path):
    """libddp(3): build/lib/libddp.a and the libraries make print-libs
    prints. The page named -luv -lcjson -lpthread -lm only, which a CUDA
    build (NCCL, the CUDA runtime) does not link with."""
    r = run(["make", "--no-print-directory", "-s", "-C", REPO, f"B={BUILD}", *make_vars(),
             "print-libs"])
    assert r.returncode == 0, r.stderr
    src = tmp_path / "hello.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "hello"
    r = run(["cc", "-std=gnu11", *san_flags(), str(src), "-o", str(exe),
             f"-I{REPO}/worker-runtime/include", f"{BUILD}/lib/libddp.a", *r.stdout.split()])
    assert r.returncode == 0, r.stderr
    r = run_alone(exe, "")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("x=21.5 backend=cpu"), r.stdout


def test_program_links_against_the_build_trees_shared_library(tmp_path):
    """README: make builds libddp.{a,so} in build/lib. The .so there was the
    file itself, with the soname libddp.so.0 that no file in build/lib had:
    a program linked with -Lbuild/lib -lddp and an rpath there linked but
    did not start ("libddp.so.0: cannot open shared object file", 127).
    build/lib now holds what make install does: libddp.so.0 and the link."""
    lib = os.path.join(BUILD, "lib")
    src = tmp_path / "hello.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "hello"
    r = run(["cc", "-std=gnu11", *san_flags(), str(src), "-o", str(exe),
             f"-I{REPO}/worker-runtime/include", f"-L{lib}", "-lddp", f"-Wl,-rpath,{lib}"])
    assert r.returncode == 0, r.stderr
    assert "libddp.so.0" in run(["readelf", "-d", str(exe)]).stdout
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["DDP_QUIET"] = "1"
    r = run([os.path.join(BUILD, "bin", "ddprun"), "--nproc-per-node=2", str(exe)], env=env,
            timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("x=46 backend=cpu"), r.stdout
    assert os.readlink(os.path.join(lib, "libddp.so")) == "libddp.so.0"


def documented_pkg_config(destdir, tmp_path):
    """The environment of a shell in which a documented recipe's pkg-config
    finds the staged tree as if it were PREFIX (a wrapper ahead in PATH)."""
    bindir = tmp_path / "pkgbin"
    bindir.mkdir()
    wrapper = bindir / "pkg-config"
    wrapper.write_text("#!/bin/sh\nexec /usr/bin/pkg-config "
                       f"--define-variable=prefix={destdir}{PREFIX} \"$@\"\n")
    wrapper.chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}",
                PKG_CONFIG_PATH=f"{destdir}{PREFIX}/lib/pkgconfig")


def test_the_static_recipe_of_libddp_3_links_libddp_in(destdir, tmp_path):
    """libddp(3)'s EXAMPLES built with $(pkg-config --cflags --libs --static
    ddp), whose -lddp the linker took from libddp.so: the program needed
    libddp.so.0 at run time, and without LD_LIBRARY_PATH did not start. The
    recipe as the page prints it, then the program under ddprun with no
    LD_LIBRARY_PATH."""
    man = open(os.path.join(REPO, "man", "libddp.3")).read()
    examples = man.split(".SH EXAMPLES", 1)[1]
    recipe = [l for l in examples.splitlines() if l.startswith("$ cc ")]
    assert len(recipe) == 1, recipe
    readme = open(os.path.join(REPO, "README.md")).read()
    (tmp_path / "hello.c").write_text(readme.split("```c\n", 1)[1].split("```", 1)[0])
    cmd = recipe[0][2:].replace("\\-", "-") + " " + " ".join(san_flags())
    r = run(["sh", "-c", cmd], cwd=tmp_path, env=documented_pkg_config(destdir, tmp_path))
    assert r.returncode == 0, cmd + "\n" + r.stderr
    exe = tmp_path / "hello"
    needed = run(["readelf", "-d", str(exe)]).stdout
    assert "(NEEDED)" in needed and "libddp" not in needed, needed
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ldd = run(["ldd", str(exe)], env=env)
    assert ldd.returncode == 0 and "libddp" not in ldd.stdout, ldd.stdout
    env["DDP_QUIET"] = "1"
    r = run([f"{destdir}{PREFIX}/bin/ddprun", "--nproc-per-node=2", str(exe)], env=env,
            timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "sum of ranks: 1\n"


def test_install_runs_ldconfig_only_for_a_real_system_install_as_root():
    """make install left ld.so's cache alone, so that after the README's
    make install the program failed: "libddp.so.0: cannot open shared object
    file". It runs ldconfig for PREFIX /usr/local or /usr, no DESTDIR, as
    root; never otherwise (staged, another prefix, a user: the README says
    what to do). Checked with make -n: nothing is installed."""
    def runs_ldconfig(prefix, destdir):
        r = run(["make", "--no-print-directory", "-n", "-C", REPO, f"B={BUILD}",
                 f"PREFIX={prefix}", f"DESTDIR={destdir}", *make_vars(), "install"],
                timeout=300)
        assert r.returncode == 0, r.stderr
        return "ldconfig" in r.stdout.split()
    root = os.geteuid() == 0
    assert runs_ldconfig("/usr/local", "") == root
    assert runs_ldconfig("/usr/", "") == root
    assert not runs_ldconfig("/usr/local", "/tmp/staged")
    assert not runs_ldconfig("/opt/ddp", "")


def test_readme_c_program_builds_with_pkg_config_and_runs_under_ddprun(destdir, tmp_path):
    """The README's libddp example, compiled as the README says, prints what it says."""
    readme = open(os.path.join(REPO, "README.md")).read()
    src = readme.split("```c\n", 1)[1].split("```", 1)[0]
    (tmp_path / "hello.c").write_text(src)
    exe = tmp_path / "hello"
    r = run(["cc", *san_flags(), str(tmp_path / "hello.c"), "-o", str(exe),
             *pkg_config(destdir, "--cflags"), *pkg_config(destdir, "--libs")])
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, LD_LIBRARY_PATH=f"{destdir}{PREFIX}/lib", DDP_QUIET="1")
    r = run([f"{destdir}{PREFIX}/bin/ddprun", "--nproc-per-node=4", str(exe)], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "sum of ranks: 6\n"
