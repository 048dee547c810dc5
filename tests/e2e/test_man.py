"""The man pages render without warnings (mandoc lint and groff -ww)."""
import glob
import os
import re

import pytest

from conftest import REPO, binary, run

PAGES = sorted(glob.glob(os.path.join(REPO, "man", "*.[13]")))


def test_all_three_pages_exist():
    names = {os.path.basename(p) for p in PAGES}
    assert {"ddprun.1", "ddpstore.1", "libddp.3"} <= names


@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_mandoc_lint_clean(page):
    r = run(["mandoc", "-Tlint", "-W", "warning", page])
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr


@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_groff_no_warnings(page):
    r = run(["groff", "-man", "-ww", "-z", page])
    assert r.returncode == 0 and r.stderr == "", r.stderr


def rendered(page):
    """The page as a terminal shows it, one paragraph line per output line."""
    r = run(["mandoc", "-Tascii", "-O", "width=400", os.path.join(REPO, "man", page)])
    assert r.returncode == 0, r.stderr
    return re.sub(".\b", "", r.stdout)


def test_every_ddpstore_command_of_help_is_a_heading_of_the_man_page():
    """Each command as --help writes it ("status [--rdzv-id ID]") starts a line of
    COMMANDS: a tag that the page breaks ("status [--rdzv-id" and then "ID]")
    fails here."""
    helptext = run([binary("ddpstore"), "--help"]).stdout
    listed = helptext.split("commands:", 1)[1].split("\nA VALUE", 1)[0]
    commands = [re.sub(r"\s*\(.*\)$", "", c.strip()) for c in re.split(r"\||\n", listed)]
    commands = [c for c in commands if c]
    text = rendered("ddpstore.1")
    section = text.split("\nCOMMANDS\n", 1)[1].split("\nCLIENT OPTIONS\n", 1)[0]
    lines = [l.strip() for l in section.splitlines()]
    assert len(commands) >= 13
    for c in commands:
        assert any(l == c or l.startswith(c + "  ") for l in lines), c


def test_the_nproc_bound_of_the_man_page_is_the_one_ddprun_enforces():
    """ddprun(1) states --nproc-per-node's bound in words; the number is the
    one ddprun's refusal states (cli.h's CLI_MAX_NPROC)."""
    r = run([binary("ddprun"), "--nproc-per-node", "999999999", "true"])
    assert r.returncode == 2, r.stderr
    bound = re.search(r"expected an integer from 1 to (\d+)", r.stderr)
    assert bound, r.stderr
    assert f"Workers on this node (default 1, at most {bound.group(1)})." in rendered("ddprun.1")


@pytest.mark.parametrize("page,dirs", [("ddprun.1", ["launcher", "rendezvous"]),
                                       ("libddp.3", ["worker-runtime"])])
def test_every_test_hook_the_code_reads_is_named_in_the_man_page(page, dirs):
    """The shipped binaries read test hooks (getenv of DDPRUN_TEST_* and
    DDP_TEST_*): each is named where a user reads the environment, with a
    warning, not left for someone to find by chance."""
    hooks = set()
    for d in dirs:
        for path in glob.glob(os.path.join(REPO, d, "**", "*.c"), recursive=True):
            with open(path) as f:
                hooks.update(re.findall(r'getenv\("((?:DDPRUN|DDP)_TEST_[A-Z_]+)"\)', f.read()))
    assert hooks, dirs
    text = rendered(page)
    assert "never set them" in text
    for h in sorted(hooks):
        assert h in text, h
