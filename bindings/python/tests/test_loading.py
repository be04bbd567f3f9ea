"""Library discovery order, the version check at import, the package version
(CMakeLists.txt's, through pyproject.toml's regex), cuBLAS lookup for a
wheel's CUDA module, and the backend registry."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import todre
from todre import _lib

SRC = os.path.dirname(os.path.dirname(os.path.abspath(todre.__file__)))
SOURCE_DIR = os.environ.get("TODRE_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


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


def _version_regex():
    """The regex pyproject.toml gives scikit-build-core's version provider."""
    text = open(os.path.join(SOURCE_DIR, "pyproject.toml"), encoding="utf-8").read()
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the one line, literally
        return re.search(r"^regex = '(.*)'$", text, re.M).group(1)
    meta = tomllib.loads(text)["tool"]["scikit-build"]["metadata"]["version"]
    assert meta["provider"] == "scikit_build_core.metadata.regex"
    assert meta["input"] == "CMakeLists.txt"
    return meta["regex"]


def test_package_version_is_the_library_version():
    """__version__ (the distribution's, else the library's) equals the loaded
    library's todre_version_string(), and so does the version pyproject.toml
    gives the distribution (its regex on CMakeLists.txt's project())."""
    assert todre.__version__ == _lib.lib.todre_version_string().decode()
    cmake = open(os.path.join(SOURCE_DIR, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(_version_regex(), cmake)
    assert m and m.group("value") == todre.version()


def test_version_regex_takes_only_the_project_version():
    rx = _version_regex()
    assert re.search(rx, "project(todre VERSION 7.8.9\n  LANGUAGES C)").group("value") == "7.8.9"
    assert re.search(rx, "project(\n  todre VERSION 1.2.3)").group("value") == "1.2.3"
    # no version written, or another project's: no match, so the build fails
    # instead of making one up
    assert re.search(rx, "cmake_minimum_required(VERSION 3.21)\nproject(todre LANGUAGES C)") \
        is None
    assert re.search(rx, "project(other VERSION 2.0.0)") is None


def test_search_order_is_env_then_bundled_then_system(monkeypatch):
    monkeypatch.delenv("TODRE_LIBRARY", raising=False)
    order = [p for p, _ in _lib._candidates()]
    assert order[:2] == [os.path.join(_lib.HERE, "libtodre.so.1"), "libtodre.so.1"]
    monkeypatch.setenv("TODRE_LIBRARY", "/x/libtodre.so.1")
    assert _lib._candidates() == [("/x/libtodre.so.1", True)]


def test_nvidia_wheel_directories_are_found_on_sys_path(tmp_path, monkeypatch):
    """cuBLAS of NVIDIA's runtime wheels: nvidia/cu13/lib (CUDA 13 on) and
    nvidia/cublas/lib (CUDA 12), in sys.path order; a directory without the
    library of the major the module was built for does not count."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, sub, name in ((a, "cu13", "libcublas.so.13"), (b, "cublas", "libcublas.so.13"),
                         (c, "cublas", "libcublas.so.12")):
        (d / "nvidia" / sub / "lib").mkdir(parents=True)
        (d / "nvidia" / sub / "lib" / name).write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(c), str(b), str(a)])
    assert _lib._nvidia_lib_dirs("13") == [str(b / "nvidia" / "cublas" / "lib"),
                                           str(a / "nvidia" / "cu13" / "lib")]
    assert _lib._nvidia_lib_dirs("12") == [str(c / "nvidia" / "cublas" / "lib")]
    assert _lib._nvidia_lib_dirs("11") == []


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
    # a repaired wheel's libtodre finds the libraries auditwheel bundled
    # through its RUNPATH $ORIGIN/../todre.libs: copied along
    libs = os.path.join(os.path.dirname(os.path.dirname(todre.library_path)), "todre.libs")
    if os.path.isdir(libs):
        shutil.copytree(libs, tmp_path / "todre.libs")
    out = _import_in_subprocess(None, pkg_root=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(pkg / "libtodre.so.1")


@pytest.mark.parametrize("number,ok", [(10100, True), (10101, True), (10200, True),
                                       (19999, True), (10000, False), (10099, False),
                                       (20000, False), (100, False), (9999, False), (0, False)])
def test_version_check_rule(number, ok):
    """Same major and at least the required minor (1.1, whose prune-plan calls
    the package uses): 1.1.x and 1.99 pass, 1.0, 2.0 and 0.x do not."""
    if ok:
        _lib.check_version(number)
    else:
        with pytest.raises(ImportError, match="needs 1.x with x >= 1"):
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
    src.write_text("unsigned todre_version_number(void) { return 10100; }\n")
    so = tmp_path / "libtodre.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    out = _import_in_subprocess(str(so))
    assert out.returncode != 0 and "lacks the symbol" in out.stderr


