#!/usr/bin/env bash
# One bounded libFuzzer run, as ctest's fuzz.<name> runs it (tests/fuzz/CMakeLists.txt):
#   run_fuzzer.sh FUZZER SEEDS WORK SECONDS [DICT]
# Runs every committed seed in SEEDS, then fuzzes for SECONDS in all; new
# inputs go to WORK/corpus (emptied first, so each run starts from the seeds
# alone and the result does not depend on earlier runs), a finding to
# WORK/artifacts/. Exits non-zero on any finding (crash, sanitizer report,
# leak, timeout, out-of-memory, harness check), printing how to reproduce it.
set -uo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4 dict=${5:-}

rm -rf "$work/corpus" "$work/artifacts"
mkdir -p "$work/corpus" "$work/artifacts"
[ -d "$seeds" ] || { echo "run_fuzzer: no seed directory $seeds" >&2; exit 1; }

# Findings must end the run: UBSan aborts (-fno-sanitize-recover=all), ASan
# reports leaks; allocations the library is asked to make stay real requests.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=4096
      -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1
      -artifact_prefix="$work/artifacts/")
[ -n "$dict" ] && args+=(-dict="$dict")

"$fuzzer" "${args[@]}" "$work/corpus" "$seeds" 2>"$work/log"
rc=$?
# The log can be large; show the end (stats, or the finding's report).
tail -n 60 "$work/log"
if [ "$rc" -ne 0 ] || ls "$work/artifacts"/* >/dev/null 2>&1; then
  echo "run_fuzzer: FINDING (exit $rc). Reproduce with:"
  for a in "$work/artifacts"/*; do
    [ -e "$a" ] && echo "  $fuzzer $a"
  done
  exit 1
fi
echo "run_fuzzer: no finding in ${seconds}s"
