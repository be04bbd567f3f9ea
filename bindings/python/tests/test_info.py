"""`python -m todre info` / `todre-info`: versions, the library's path, the
OpenBLAS in use, backends (or why not), devices and the CPU instruction set;
a module file the registry could not load is shown with the loader's reason.
With TODRE_TEST_INSTALLED=1 (scripts/test_wheel.sh) also the installed wheel
itself: what it carries, where each library comes from, one version."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import todre
from todre import __main__ as todre_main
from todre import _lib

INSTALLED = bool(os.environ.get("TODRE_TEST_INSTALLED"))


def _run(*args, env=None, module=True):
    cmd = [sys.executable, "-m", "todre", *args] if module else list(args)
    full = dict(os.environ)
    # the very package under test, also in the child
    root = os.path.dirname(os.path.dirname(os.path.abspath(todre.__file__)))
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [root, full.get("PYTHONPATH")]))
    full.update(env or {})
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return out.stdout


def _cpu_arch():
    return todre.devices("cpu")[0].arch


def test_text_names_versions_path_backends_and_isa():
    lines = _run("info").splitlines()
    assert lines[0].startswith(f"todre {todre.__version__} (package ")
    assert lines[1].startswith(f"libtodre {todre.version()} from {todre.library_path} (")
    text = "\n".join(lines)
    for b in todre.backends():
        if b.available:
            assert f"backend {b.name}: available, {b.device_count} device" in text
        else:
            assert f"backend {b.name}: unavailable ({b.reason}); module {b.path}" in text
    assert "backend cpu: available, 1 device; built in" in text
    assert f"; instruction set {_cpu_arch()}; " in text
    assert any(l.startswith("OpenBLAS: /") and "OpenBLAS " in l for l in lines), text


def test_the_instruction_set_shown_follows_TODRE_CPU_ISA():
    text = _run("info", env={"TODRE_CPU_ISA": "generic"})
    assert "TODRE_CPU_ISA=generic" in text and "; instruction set generic; " in text
    data = json.loads(_run("info", "--json", env={"TODRE_CPU_ISA": "generic"}))
    assert data["backends"][0]["devices"][0]["arch"] == "generic"


def test_the_cpu_overrides_are_shown_and_TODRE_CPU_PROCS_sets_the_cores():
    env = {"TODRE_CPU_PROCS": "3", "TODRE_CPU_GRAM": "blas"}
    text = _run("info", env=env)
    assert "TODRE_CPU_PROCS=3" in text and "TODRE_CPU_GRAM=blas" in text
    assert "; 3 cores" in text
    data = json.loads(_run("info", "--json", env=env))
    assert data["cpu_overrides"] == env
    assert data["backends"][0]["devices"][0]["cores"] == 3
    # a value that is not a count in 1..1024 is ignored: the processors OpenMP sees
    plain = json.loads(_run("info", "--json"))["backends"][0]["devices"][0]["cores"]
    for bad in ("0", "x", "1025", "3x"):
        data = json.loads(_run("info", "--json", env={"TODRE_CPU_PROCS": bad}))
        assert data["backends"][0]["devices"][0]["cores"] == plain, bad


def test_json_equals_what_the_api_reports():
    data = json.loads(_run("info", "--json"))
    assert data["package"]["version"] == todre.__version__
    assert data["library"] == {"version": todre.version(),
                               "version_number": int(_lib.lib.todre_version_number()),
                               "path": todre.library_path,
                               "source": data["library"]["source"]}
    assert data["library"]["source"] in ("TODRE_LIBRARY", "bundled with the package", "system")
    regs = [b for b in data["backends"] if b["registered"]]
    assert [(b["name"], b["available"], b["reason"], b["path"]) for b in regs] == \
        [(b.name, b.available, b.reason, b.path) for b in todre.backends()]
    cpu = todre.devices("cpu")[0]
    assert regs[0]["devices"] == [{"index": 0, "name": cpu.name, "arch": cpu.arch,
                                   "total_memory": cpu.total_memory,
                                   "compute_capability": [0, 0], "cores": cpu.cores}]
    blas = data["openblas"]
    assert os.path.basename(blas["path"]).startswith("libopenblas")
    assert blas["config"].startswith("OpenBLAS ") and blas["threads"] >= 1


def test_blas_note_names_an_openblas_older_than_the_cpu():
    """An OpenBLAS that runs kernels of a lesser class than the level libtodre
    uses gets a line (as src/cpu/blas_class.h ranks them); one of the CPU's
    class or better, an unknown core or the generic level get none."""
    note = todre_main.blas_note("Prescott", "amx")
    assert note and "Prescott" in note and "OPENBLAS_CORETYPE=SkylakeX" in note
    assert "OPENBLAS_CORETYPE=Haswell" in todre_main.blas_note("Sandybridge", "avx2")
    assert "SkylakeX" in todre_main.blas_note("haswell", "avx512")
    for core, arch in (("SkylakeX", "amx"), ("Haswell", "avx2"), ("SkylakeX", "avx2"),
                       ("Zen", "avx2"), ("NewCore", "avx512"), (None, "amx"),
                       ("Prescott", "generic"), ("Prescott", None)):
        assert todre_main.blas_note(core, arch) is None, (core, arch)
    data = json.loads(_run("info", "--json"))
    cpu = todre.devices("cpu")[0]
    assert data["openblas"]["note"] == todre_main.blas_note(data["openblas"].get("core"), cpu.arch)


def test_module_main_and_console_script_agree(capsys):
    assert todre_main.main(["info", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert todre_main.info_main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == a
    assert todre_main.main([]) == 2  # no command: usage on stderr
    assert "info" in capsys.readouterr().err


def test_a_module_that_cannot_be_loaded_is_shown_with_the_loaders_reason(tmp_path):
    """A libtodre-ghost.so next to the library whose dependency is missing (as
    a CUDA module without cuBLAS): not registered, and info says why."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the test module"
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(todre.library_path, lib / "libtodre.so.1")
    libs = os.path.join(os.path.dirname(os.path.dirname(todre.library_path)), "todre.libs")
    if os.path.isdir(libs):  # a repaired wheel's bundled OpenBLAS, found via $ORIGIN/../todre.libs
        shutil.copytree(libs, tmp_path / "todre.libs")
    (tmp_path / "dep.c").write_text("int ghost_dep(void) { return 1; }\n")
    (tmp_path / "mod.c").write_text(textwrap.dedent("""
        int ghost_dep(void);
        int todre_module_register(void) { return ghost_dep(); }
    """))
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libghostdep.so"),
                    str(tmp_path / "dep.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib / "libtodre-ghost.so"),
                    str(tmp_path / "mod.c"), "-L", str(tmp_path), "-lghostdep"], check=True)
    os.remove(tmp_path / "libghostdep.so")
    env = {"TODRE_LIBRARY": str(lib / "libtodre.so.1")}
    text = _run("info", env=env)
    line = [l for l in text.splitlines() if l.startswith("backend ghost:")]
    assert len(line) == 1, text
    assert line[0].startswith("backend ghost: not loaded (no backend named 'ghost' is registered")
    assert "libghostdep.so: cannot open shared object file" in line[0]
    assert line[0].endswith(f"; module {lib / 'libtodre-ghost.so'}")
    data = json.loads(_run("info", "--json", env=env))
    ghost = [b for b in data["backends"] if b["name"] == "ghost"]
    assert ghost and not ghost[0]["registered"] and not ghost[0]["available"]


if INSTALLED:
    # The installed wheel (scripts/test_wheel.sh): only meaningful there.

    PKG = os.path.dirname(os.path.abspath(todre.__file__))

    def test_the_wheel_carries_and_loads_its_own_library():
        assert "TODRE_LIBRARY" not in os.environ
        assert todre.library_path == os.path.join(PKG, "libtodre.so.1")
        config = _lib.build_config()
        assert config is not None and config.version == todre.version()
        from importlib import metadata
        assert metadata.version("todre") == todre.__version__ == todre.version()
        data = json.loads(_run("info", "--json"))
        assert data["library"]["source"] == "bundled with the package"

    def test_openblas_and_openmp_come_from_the_wheel():
        libs = os.path.join(os.path.dirname(PKG), "todre.libs")
        mapped = _lib.mapped_files()
        blas = [p for p in mapped if os.path.basename(p).startswith("libopenblas")]
        gomp = [p for p in mapped if os.path.basename(p).startswith("libgomp")]
        assert blas and all(os.path.dirname(p) == libs for p in blas), blas
        # PyTorch, when imported, maps its own libgomp too: the wheel's must be there
        assert any(os.path.dirname(p) == libs for p in gomp), gomp

    def test_the_cuda_module_finds_cublas_and_says_why_it_cannot_run():
        config = _lib.build_config()
        module = os.path.join(PKG, "libtodre-cuda.so")
        assert os.path.exists(module) == bool(config.cuda_major)
        if not config.cuda_major:
            return  # built without nvcc: nothing to load
        cuda = [b for b in todre.backends() if b.name == "cuda"]
        assert cuda, todre.backend_available("cuda")[1]  # registered: cuBLAS was found
        assert cuda[0].path == module
        cublas = [p for p in _lib.mapped_files()
                  if os.path.basename(p) == f"libcublas.so.{config.cuda_major}"]
        assert cublas, "libtodre-cuda.so registered without cuBLAS mapped?"
        if _lib.cublas_preloaded:  # NVIDIA's wheels on sys.path: those are the ones used
            assert _lib.cublas_preloaded[-1] in cublas
        if not cuda[0].available:
            assert cuda[0].reason and cuda[0].device_count == 0
            assert "backend cuda: unavailable (" + cuda[0].reason in _run("info")

    def test_todre_info_console_script():
        script = os.path.join(os.path.dirname(sys.executable), "todre-info")
        assert os.path.exists(script), script
        a = json.loads(_run(script, "--json", module=False))
        b = json.loads(_run("info", "--json"))
        assert a == b
