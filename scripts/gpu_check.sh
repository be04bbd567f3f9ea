#!/usr/bin/env bash
# Every check of the CUDA backend that needs a real NVIDIA GPU, in one run
# (docs/testing.md, "On a GPU"). CI has no GPU: there these tests skip, and
# this script is what a machine with a GPU runs.
#
#   bash scripts/gpu_check.sh [BUILD_DIR] [LOG_DIR]
#
# BUILD_DIR (default build-gpu) is a Release build with the CUDA module:
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTODRE_CUDA=ON
#   cmake --build build-gpu -j
# Needs python3 with PyTorch (CUDA), NumPy, pytest, pycparser and
# transformers >= 5 for the Python phases. Each phase writes LOG_DIR/<phase>.log
# and has a time limit; GPU_PHASES (comma-separated, default all) picks some:
#   ctest   the C tests that touch the GPU (unit.cuda_parity, _contract,
#           _threads, unit.context, unit.registry, unit.memory_bound, cuda.*),
#           and the examples, one at a time: the CPU-only tests are CI's, and
#           run all at once with a thread each per core they only measure
#           oversubscription
#   python  the Python package's tests (test_cuda.py: torch.cuda tensors
#           through DLPack, zero copy)
#   cli     the command-line tool's suite, "auto" picking the GPU
#   bench   bench/bench_cuda.py (stage 1 and 2 against PyTorch)
#   e2e     bench/bench_e2e.py --device cuda, 7B language-model shapes
#   sanit   compute-sanitizer memcheck, racecheck and synccheck of the
#           contract tests
# Exit status: the number of phases that failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$ROOT/build-gpu}" && pwd)
LOG=${2:-$ROOT/gpu-logs}
mkdir -p "$LOG"
PHASES=${GPU_PHASES:-ctest,python,cli,bench,e2e,sanit}
PY=${PYTHON:-python3}
failed=0

phase() { # name limit_s command...
    local name=$1 limit=$2
    shift 2
    case ",$PHASES," in *",$name,"*) ;; *) return 0 ;; esac
    local t0=$SECONDS
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    timeout --kill-after=5 "$limit" "$@" > "$LOG/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc in $((SECONDS - t0)) s"
    tail -n "${GPU_TAIL:-15}" "$LOG/$name.log"
    [ $rc -eq 0 ] || failed=$((failed + 1))
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee "$LOG/info.log"
"$B/tools/todre/todre" info 2>&1 | tee -a "$LOG/info.log"

phase ctest 240 ctest --test-dir "$B" --timeout 150 --output-on-failure \
    -R '^(unit\.(cuda_|context|registry|memory_bound)|cuda\.|example\.)'


pyenv=(env "TODRE_LIBRARY=$B/libtodre.so.1" "TODRE_BUILD_INCLUDE_DIR=$B/include"
       "TODRE_CLI=$B/tools/todre/todre" "PYTHONPATH=$ROOT/bindings/python/src${PYTHONPATH:+:$PYTHONPATH}"
       HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1)
phase python 90 "${pyenv[@]}" "$PY" -m pytest -q -p no:cacheprovider -rs \
    --ignore="$ROOT/bindings/python/tests/hf" --ignore="$ROOT/bindings/python/tests/vllm" \
    "$ROOT/bindings/python/tests"
phase cli 90 "${pyenv[@]}" TODRE_CLI_EXPECT_REGISTRY=cpu=1,cuda=1 "$PY" -m pytest -q \
    -p no:cacheprovider -rs --rootdir="$ROOT/tests/cli" "$ROOT/tests/cli"
phase bench 180 "${pyenv[@]}" "$PY" "$ROOT/bench/bench_cuda.py" --lib "$B/libtodre.so.1" \
    --repeats "${GPU_BENCH_REPEATS:-20}" --stage "${GPU_BENCH_STAGE:-both}"
phase e2e 240 "${pyenv[@]}" "$PY" "$ROOT/bench/bench_e2e.py" --device cuda --dtype bfloat16 \
    --preset 7b --qwen-px 1344 --reps 3 --new-tokens 32 --threads "$(nproc)"

sanit() {
    local cs
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    [ -n "$cs" ] || { echo "skipped: no compute-sanitizer"; return 0; }
    local rc=0
    for tool in memcheck racecheck synccheck; do
        for t in ${GPU_SANIT_TESTS:-test_cuda_contract}; do
            echo "-- $tool: $t"
            "$cs" --tool "$tool" --error-exitcode 99 "$B/tests/$t" || rc=1
        done
    done
    return $rc
}
export B GPU_SANIT_TESTS
export -f sanit        # timeout runs programs, not shell functions
phase sanit 120 bash -c sanit

echo "== phases failed: $failed"
exit $failed
