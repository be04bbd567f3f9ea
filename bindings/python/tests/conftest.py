"""Shared setup: the package from this source tree (or, with
TODRE_TEST_INSTALLED=1, the installed one), the float64 reference
(tests/reference/todre_ref.py) and the C CLI (env TODRE_CLI)."""

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("TODRE_SOURCE_DIR") or os.path.abspath(
    os.path.join(HERE, "..", "..", ".."))

if not os.environ.get("TODRE_TEST_INSTALLED"):
    sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "src")))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "reference"))

# test_device_emu.py needs the process to start with the emulated CUDA module
# registered (TODRE_BACKEND_PATH; ctest python.device_emu sets it up).
collect_ignore = [] if os.environ.get("TODRE_TEST_EMULATED") else ["test_device_emu.py"]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def cli():
    """Path of the `todre` CLI; the one test that needs it is skipped without it."""
    path = os.environ.get("TODRE_CLI")
    if not path or not os.path.exists(path):
        pytest.skip("TODRE_CLI not set (the ctest registration sets it)")
    return path
