"""Library discovery order, the version check at import, the package version
(CMakeLists.txt's, through setup.py), and the backend registry."""

import os
import shutil
import subprocess
import sys
import textwrap

import importlib.util

import pytest

import todre
from todre import _lib

SRC = os.path.dirname(os.path.dirname(os.path.abspath(todre.__file__)))
PKG_DIR = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


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
    assert major == _lib.REQUIRED_MAJOR == 1 and minor >= _lib.REQUIRED_MINOR


def _setup_py():
    spec = importlib.util.spec_from_file_location("todre_setup", os.path.join(PKG_DIR,
                                                                              "setup.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_package_version_is_the_library_version():
    """__version__ (the distribution's, else the library's) equals the loaded
    library's todre_version_string(), and so does the version setup.py gives
    the distribution (read from CMakeLists.txt)."""
    assert todre.__version__ == _lib.lib.todre_version_string().decode()
    assert _setup_py().package_version() == todre.version()


def test_setup_py_fails_loudly_without_a_cmake_version(tmp_path, monkeypatch):
    setup = _setup_py()
    lists = tmp_path / "CMakeLists.txt"
    lists.write_text("cmake_minimum_required(VERSION 3.21)\nproject(todre LANGUAGES C)\n")
    monkeypatch.setenv("TODRE_CMAKE_LISTS", str(lists))
    with pytest.raises(RuntimeError, match="no 'project\\(todre VERSION"):
        setup.package_version()
    lists.write_text("project(todre VERSION 7.8.9\n  LANGUAGES C)\n")
    assert setup.package_version() == "7.8.9"
    monkeypatch.delenv("TODRE_CMAKE_LISTS")
    monkeypatch.setattr(setup, "HERE", str(tmp_path / "nowhere" / "bindings" / "python"))
    with pytest.raises(RuntimeError, match="cannot find the repository's CMakeLists.txt"):
        setup.package_version()


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
    shutil.copy(todre.library_path, pkg / "libtodre.so.1")
    out = _import_in_subprocess(None, pkg_root=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(pkg / "libtodre.so.1")


@pytest.mark.parametrize("number,ok", [(10000, True), (10001, True), (10100, True),
                                       (19999, True), (20000, False), (100, False),
                                       (9999, False), (0, False)])
def test_version_check_rule(number, ok):
    """Same major and at least the required minor (1.0): 1.0.x and 1.99 pass,
    2.0 and 0.x do not."""
    if ok:
        _lib.check_version(number)
    else:
        with pytest.raises(ImportError, match="needs 1.x with x >= 0"):
            _lib.check_version(number)


def test_incompatible_library_is_refused_at_import(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a fake library")
    src = tmp_path / "fake.c"
    src.write_text(textwrap.dedent("""
        unsigned todre_version_number(void) { return 100; }
    """))
    so = tmp_path / "libtodre.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    out = _import_in_subprocess(str(so))
    assert out.returncode != 0
    assert "version 0.1.0" in out.stderr and "needs 1.x" in out.stderr


def test_a_library_lacking_a_function_is_refused_at_import(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a fake library")
    src = tmp_path / "fake.c"
    src.write_text("unsigned todre_version_number(void) { return 10000; }\n")
    so = tmp_path / "libtodre.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    out = _import_in_subprocess(str(so))
    assert out.returncode != 0 and "lacks the symbol" in out.stderr


