"""Library discovery order, the version check at import, version and backends."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import todre
from todre import _lib

SRC = os.path.dirname(os.path.dirname(os.path.abspath(todre.__file__)))


def _import_in_subprocess(env_lib, pkg_root=SRC):
    env = dict(os.environ)
    env.pop("TODRE_LIBRARY", None)
    if env_lib is not None:
        env["TODRE_LIBRARY"] = env_lib
    env["PYTHONPATH"] = pkg_root
    return subprocess.run([sys.executable, "-c", "import todre; print(todre.library_path)"],
                          env=env, capture_output=True, text=True, cwd="/")


def test_version_matches_the_loaded_library():
    major, minor, patch = todre.version_info()
    assert todre.version() == f"{major}.{minor}.{patch}"
    assert major == _lib.REQUIRED_MAJOR and minor >= _lib.REQUIRED_MINOR


def test_env_var_overrides_the_search():
    lib = os.environ.get("TODRE_LIBRARY")
    if lib:
        assert os.path.samefile(todre.library_path, lib)
    out = _import_in_subprocess(todre.library_path)
    assert out.returncode == 0, out.stderr
    assert os.path.samefile(out.stdout.strip(), todre.library_path)


def test_env_var_that_does_not_load_is_a_clear_import_error(tmp_path):
    out = _import_in_subprocess(str(tmp_path / "missing.so"))
    assert out.returncode != 0
    assert "ImportError" in out.stderr and "TODRE_LIBRARY" in out.stderr


def test_a_library_that_is_not_libtodre_is_refused():
    libm = None
    for cand in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                 "/lib64/libm.so.6"):
        if os.path.exists(cand):
            libm = cand
    if libm is None:
        pytest.skip("no libm.so.6 at a known path")
    out = _import_in_subprocess(libm)
    assert out.returncode != 0 and "not libtodre" in out.stderr


def test_copy_next_to_the_package_is_found(tmp_path):
    pkg = tmp_path / "todre"
    shutil.copytree(os.path.dirname(todre.__file__), pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "libtodre.so*"))
    shutil.copy(todre.library_path, pkg / "libtodre.so.0")
    out = _import_in_subprocess(None, pkg_root=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(pkg / "libtodre.so.0")


@pytest.mark.parametrize("number,ok", [(100, True), (199, True), (101, True), (500, True),
                                       (10100, False), (99, False), (0, False)])
def test_version_check_rule(number, ok):
    """Same major and at least the required minor (0.1): 0.1.x and 0.5 pass,
    1.1 and 0.0.99 do not."""
    if ok:
        _lib.check_version(number)
    else:
        with pytest.raises(ImportError, match="needs 0.x with x >= 1"):
            _lib.check_version(number)


def test_incompatible_library_is_refused_at_import(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a fake library")
    src = tmp_path / "fake.c"
    src.write_text(textwrap.dedent("""
        unsigned todre_version_number(void) { return 10203; }
    """))
    so = tmp_path / "libtodre.so.0"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    out = _import_in_subprocess(str(so))
    assert out.returncode != 0
    assert "version 1.2.3" in out.stderr and "needs 0.x" in out.stderr


def test_backends():
    names = todre.backends()
    assert "cpu" in names and set(names) <= {"cpu", "cuda"}
    ok, reason = todre.backend_available("cpu")
    assert ok and reason == ""
    ok, reason = todre.backend_available("cuda")
    assert ok == ("cuda" in names)
    if not ok:
        assert reason  # says why
    with pytest.raises(todre.TodreError) as e:
        todre.backend_available("tpu")
    assert e.value.status == todre.Status.INVALID_ARGUMENT
