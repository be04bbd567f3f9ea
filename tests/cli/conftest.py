"""Shared fixtures for the `todre` command-line tests.

The tool is found through TODRE_CLI (set by tests/cli/CMakeLists.txt) or, failing
that, under TODRE_BINARY_DIR. The float64 references live in
tests/reference (TODRE_SOURCE_DIR); these tests import todre_ref from there
and compute the stage-2 formula themselves.
"""
import json
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
def cli_exe():
    """Path of the todre executable under test."""
    path = _cli_path()
    assert os.access(path, os.X_OK), "not an executable: %s" % path
    return path


@pytest.fixture(scope="session")
def cli(cli_exe):
    """run(*args, env={...}) -> Result; env entries are added to the
    environment (a value of None removes the variable)."""

    def run(*args, env=None):
        full_env = None
        if env:
            full_env = dict(os.environ)
            for key, value in env.items():
                if value is None:
                    full_env.pop(key, None)
                else:
                    full_env[key] = str(value)
        proc = subprocess.run([cli_exe] + [str(a) for a in args], capture_output=True,
                              text=True, timeout=120, env=full_env)
        return Result(proc)

    return run


@pytest.fixture(scope="session", autouse=True)
def expected_registry(cli):
    """Where a ctest sets TODRE_CLI_EXPECT_REGISTRY ("cpu=1,cuda=0": the
    registered backends in order, each available or not; see tests/cli/CMakeLists.txt),
    the tool must see exactly that, so that a suite meant to run on a given
    backend cannot pass on another one."""
    want = os.environ.get("TODRE_CLI_EXPECT_REGISTRY")
    if want is None:
        return
    info = json.loads(cli("info", "--json").ok())
    got = ",".join("%s=%d" % (name, b["available"]) for name, b in info["backends"].items())
    assert got == want, "registry %s, expected %s" % (got, want)


def auto_backend(info):
    """The backend "auto" picks, from `todre info --json`: the first available
    backend after "cpu" in registry order, else "cpu"."""
    for name, backend in info["backends"].items():
        if name != "cpu" and backend["available"]:
            return name
    return "cpu"


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
