"""Shared fixtures for the `todre` command-line tests.

The tool is found through TODRE_CLI (set by tests/cli.cmake) or, failing
that, under TODRE_BINARY_DIR. The float64 references live in
tests/reference (TODRE_SOURCE_DIR); these tests import todre_ref from there
and compute the stage-2 formula themselves.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("TODRE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SOURCE_DIR / "tests" / "reference"))


def _cli_path():
    path = os.environ.get("TODRE_CLI")
    if path:
        return path
    binary = os.environ.get("TODRE_BINARY_DIR")
    if binary:
        return str(Path(binary) / "tools" / "todre" / "todre")
    pytest.exit("set TODRE_CLI to the todre executable", returncode=2)


class Result:
    """What one run of the tool did."""

    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def ok(self):
        assert self.rc == 0, "exit %d, stderr: %s" % (self.rc, self.err)
        assert self.err == "", self.err
        return self.out


@pytest.fixture(scope="session")
def cli():
    path = _cli_path()
    assert os.access(path, os.X_OK), "not an executable: %s" % path

    def run(*args):
        proc = subprocess.run([path] + [str(a) for a in args], capture_output=True,
                              text=True, timeout=120)
        return Result(proc)

    return run


@pytest.fixture
def npy(tmp_path):
    """save(name, array) -> path of a .npy file written with numpy."""

    def save(name, array):
        path = tmp_path / (name + ".npy")
        np.save(path, array)
        return path

    return save


def assert_one_line_error(res):
    """The tool's error contract: exit 2, nothing on stdout, one line on stderr."""
    assert res.rc == 2, "exit %d (stdout %r, stderr %r)" % (res.rc, res.out, res.err)
    assert res.out == ""
    assert res.err.endswith("\n") and res.err.count("\n") == 1, repr(res.err)
    assert res.err.startswith("todre"), repr(res.err)
