"""The man pages render without warnings (mandoc lint and groff -ww)."""
import glob
import os

import pytest

from conftest import REPO, run

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
