"""`todre info` and `todre --version`: the version is the library's own,
every registered backend is listed with where it came from and whether it
can run, and every device of an available backend with its properties."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import SOURCE_DIR, assert_one_line_error, auto_backend

CPU_ARCHS = {"amx", "avx512", "avx2", "generic"}


def project_version():
    """(major, minor, patch) from project(todre VERSION ...) in CMakeLists.txt."""
    text = (SOURCE_DIR / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*todre\s+VERSION\s+(\d+)\.(\d+)\.(\d+)", text)
    assert m, "no project(todre VERSION x.y.z) in CMakeLists.txt"
    return tuple(int(g) for g in m.groups())


_VERSION_QUERY = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "lib.todre_version_string.restype = ctypes.c_char_p\n"
    "lib.todre_version_number.restype = ctypes.c_uint\n"
    "print(lib.todre_version_string().decode(), lib.todre_version_number())\n"
)


@pytest.fixture(scope="module")
def library(cli_exe):
    """(version string, version number) of the libtodre the tool runs with
    (as the dynamic loader resolves it), asked through ctypes in a child
    Python. A sanitizer build's library needs its runtime loaded first, so
    the child preloads the runtimes the tool links (ASan must come first)."""
    out = subprocess.run(["ldd", cli_exe], capture_output=True, text=True, check=True).stdout
    m = re.search(r"libtodre\.so\.\d+\s*=>\s*(\S+)", out)
    assert m, "the tool does not link libtodre.so.<major>:\n" + out
    env = dict(os.environ)
    runtimes = re.findall(r"lib(?:asan|ubsan|tsan)\.so\S*\s*=>\s*(\S+)", out)
    if runtimes:
        runtimes.sort(key=lambda p: "asan" not in p)
        env["LD_PRELOAD"] = ":".join(runtimes)
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    r = subprocess.run([sys.executable, "-c", _VERSION_QUERY, m.group(1)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    string, number = r.stdout.split()
    return string, int(number)


@pytest.fixture(scope="module")
def info(cli):
    return json.loads(cli("info", "--json").ok())


def test_version_is_the_librarys(cli, info, library):
    string, number = library
    major, minor, patch = project_version()
    assert string == "%d.%d.%d" % (major, minor, patch)
    assert number == major * 10000 + minor * 100 + patch
    assert info["version"] == string
    assert info["version_number"] == number
    assert cli("--version").ok() == "todre %s\n" % string
    first = cli("info").ok().splitlines()[0]
    assert first == "libtodre %s (todre tool built against %s)" % (string, string)


def test_cpu_backend_is_first_and_available_with_its_device(info):
    names = list(info["backends"])
    assert names[0] == "cpu" and len(set(names)) == len(names)
    cpu = info["backends"]["cpu"]
    assert cpu["available"] is True and "reason" not in cpu
    assert cpu["path"] == ""  # built in
    assert cpu["device_type"] == 1  # kDLCPU
    assert cpu["device_count"] == 1 and len(cpu["devices"]) == 1
    dev = cpu["devices"][0]
    assert dev["index"] == 0 and "error" not in dev
    assert isinstance(dev["name"], str) and dev["name"].strip()
    assert dev["arch"] in CPU_ARCHS
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < dev["total_memory"] <= phys * 1.01
    assert dev["compute_major"] == 0 and dev["compute_minor"] == 0
    assert 1 <= dev["cores"] <= 1024


def test_every_backend_entry_is_consistent(info):
    for name, b in info["backends"].items():
        assert re.fullmatch(r"[a-z0-9_]+", name), name
        assert isinstance(b["available"], bool)
        if b["available"]:
            assert "reason" not in b
            assert b["device_count"] >= 1 and len(b["devices"]) == b["device_count"]
            assert [d["index"] for d in b["devices"]] == list(range(b["device_count"]))
        else:
            assert isinstance(b["reason"], str) and b["reason"].strip(), name
            assert "\n" not in b["reason"]
            assert b["device_count"] == 0 and b["devices"] == []
        if name != "cpu":  # a module: the file it was loaded from
            assert os.path.isfile(b["path"]), (name, b["path"])
        for d in b["devices"]:
            if "error" in d:
                continue
            assert d["name"].strip() and d["arch"] and d["total_memory"] > 0 and d["cores"] >= 1
            if name != "cpu":
                assert re.fullmatch(r"sm_\d+", d["arch"]), d["arch"]
                assert d["compute_major"] >= 1


def test_text_lists_what_json_lists(cli, info):
    lines = cli("info").ok().splitlines()
    backend_lines = [line for line in lines if line.startswith("backend ")]
    assert [line.split(":")[0] for line in backend_lines] == \
        ["backend " + name for name in info["backends"]]
    it = iter(lines[1:])
    for name, b in info["backends"].items():
        line = next(it)
        if b["available"]:
            n = b["device_count"]
            head = "backend %s: available, %d device%s" % (name, n, "" if n == 1 else "s")
        else:
            head = "backend %s: unavailable (%s)" % (name, b["reason"])
        tail = "; built in" if b["path"] == "" else "; module " + b["path"]
        assert line == head + tail
        for d in b["devices"]:
            line = next(it)
            assert line.startswith("  device %d: " % d["index"]), line
            if "error" in d:
                assert "error (%s)" % d["error"] in line
                continue
            assert line.startswith("  device %d: %s; arch %s; " % (d["index"], d["name"],
                                                                 d["arch"])), line
            gib = "%.1f GiB memory" % (d["total_memory"] / 2**30)
            assert gib in line
            unit = "cores" if b["device_type"] == 1 else "multiprocessors"
            assert line.endswith("; %d %s" % (d["cores"], unit)), line
            if d["compute_major"]:
                assert "compute capability %d.%d" % (d["compute_major"], d["compute_minor"]) \
                    in line
    assert next(it, None) is None


def test_cpu_isa_cap_shows_in_arch(cli):
    out = json.loads(cli("info", "--json", env={"TODRE_CPU_ISA": "generic"}).ok())
    assert out["backends"]["cpu"]["devices"][0]["arch"] == "generic"


def test_backend_path_limits_the_scan(cli, npy, tmp_path):
    """TODRE_BACKEND_PATH replaces the default search: an empty directory, or
    a file that is no module, registers nothing beyond the built-in CPU."""
    empty = tmp_path / "empty"
    empty.mkdir()
    bogus = tmp_path / "libtodre-bogus.so"
    bogus.write_text("not a shared object\n")
    E = np.random.default_rng(5).standard_normal((12, 4)).astype(np.float32)
    emb = npy("e", E)
    for path in (str(empty), str(bogus), "%s:%s" % (empty, bogus)):
        env = {"TODRE_BACKEND_PATH": path}
        out = json.loads(cli("info", "--json", env=env).ok())
        assert list(out["backends"]) == ["cpu"], path
        assert auto_backend(out) == "cpu"
        sel = json.loads(cli("select", "--embeddings", emb, "--keep", 3, "--json", env=env).ok())
        assert sel["backend"] == "cpu" and sel["k"] == 3
        for name in ("cuda", "bogus"):
            res = cli("select", "--embeddings", emb, "--keep", 3, "--backend", name, env=env)
            assert_one_line_error(res)
            assert "--backend %s: TODRE_ERR_" % name in res.err, res.err


def test_backend_is_passed_by_name(cli, npy, info):
    E = np.random.default_rng(6).standard_normal((12, 4)).astype(np.float32)
    emb = npy("e", E)
    cpu = json.loads(cli("select", "--embeddings", emb, "--keep", 4, "--backend", "cpu",
                         "--json").ok())
    auto = json.loads(cli("select", "--embeddings", emb, "--keep", 4, "--backend", "auto",
                          "--json").ok())
    assert cpu["backend"] == "cpu"
    assert auto["backend"] == auto_backend(info)
    # not a backend name at all
    for bad, shown in (("", '""'), ("CPU", "CPU"), ("cpu:0", "cpu:0")):
        res = cli("select", "--embeddings", emb, "--keep", 4, "--backend", bad)
        assert_one_line_error(res)
        assert "--backend %s: TODRE_ERR_INVALID_ARGUMENT: " % shown in res.err, res.err
    # a well-formed name that no module registered
    res = cli("select", "--embeddings", emb, "--keep", 4, "--backend", "tpu")
    assert_one_line_error(res)
    assert re.search(r"--backend tpu: TODRE_ERR_(BACKEND_UNAVAILABLE|INVALID_ARGUMENT): .*tpu",
                     res.err), res.err
