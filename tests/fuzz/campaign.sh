#!/usr/bin/env bash
# A long fuzzing campaign (docs/testing.md, "Fuzzing"):
#   tests/fuzz/campaign.sh BUILD_DIR SECONDS OUTDIR [NAME...]
# BUILD_DIR is a clang build with the fuzzers (tests/fuzz/CMakeLists.txt); NAME is any
# of npy params dlpack select relevance (default: all). The harnesses run
# concurrently for SECONDS of wall time each, at nice 10, each growing its
# corpus in OUTDIR/NAME/corpus from the committed seeds (a later campaign
# with the same OUTDIR continues it). A finding stops libFuzzer; the harness
# is restarted on its corpus until the time is up, and the input is kept in
# OUTDIR/NAME/artifacts/. With FUZZ_RUNS=N in the environment a harness also
# stops after N executions (leaving the CPU to the others). Prints, per
# harness: executions, seconds, exec/s, corpus size, findings; also written
# to OUTDIR/summary.txt, and the count of kept failing inputs to
# OUTDIR/NAME/artifact_count. Exits 1 if any harness kept one.
set -uo pipefail
[ $# -ge 3 ] || { sed -n '2,14p' "$0"; exit 2; }
build=$1 seconds=$2 out=$3
shift 3
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(npy params dlpack select relevance)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local name=$1 dir=$out/$1 bin=$build/tests/fuzz/fuzz_$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  local dict=() execs=0 start=$SECONDS left runs=0
  [ -f "$src/dict/$name.dict" ] && dict=(-dict="$src/dict/$name.dict")
  local limit=()
  while left=$((seconds - (SECONDS - start))); [ "$left" -gt 5 ]; do
    if [ -n "${FUZZ_RUNS:-}" ]; then
      [ "$execs" -lt "$FUZZ_RUNS" ] || break
      limit=(-runs=$((FUZZ_RUNS - execs)))
    fi
    runs=$((runs + 1))
    nice -n 10 "$bin" -max_total_time="$left" "${limit[@]}" -timeout=20 -rss_limit_mb=2048 -max_len=4096 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "${dict[@]}" \
      "$dir/corpus" "$src/corpus/$name" >"$dir/log.$runs" 2>&1
    local n
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log.$runs" | tail -n1)
    if [ -z "$n" ]; then # a crash: count the executions libFuzzer printed last
      n=$(grep -o '^#[0-9]*' "$dir/log.$runs" | tail -n1 | tr -d '#')
    fi
    execs=$((execs + ${n:-0}))
  done
  local secs=$((SECONDS - start))
  local corpus findings
  corpus=$(find "$dir/corpus" -type f | wc -l)
  findings=$(find "$dir/artifacts" -type f | wc -l)
  printf '%-10s %12d executions in %6d s = %7d exec/s; corpus %5d; findings %d (restarts %d)\n' \
    "$name" "$execs" "$secs" "$((execs / (secs > 0 ? secs : 1)))" "$corpus" "$findings" \
    "$((runs - 1))" | tee "$dir/summary.txt"
  echo "$findings" >"$dir/artifact_count"
}

for name in "${names[@]}"; do
  [ -x "$build/tests/fuzz/fuzz_$name" ] || { echo "no $build/tests/fuzz/fuzz_$name" >&2; exit 2; }
done
mkdir -p "$out"
for name in "${names[@]}"; do run_one "$name" & done
wait
cat "$out"/*/summary.txt >"$out/summary.txt"
echo "== campaign: $(date -u +%FT%TZ), $(nproc) CPUs, ${seconds}s per harness"
cat "$out/summary.txt"
# exit status: 1 if any harness kept an input that failed
! grep -q -v -x 0 "$out"/*/artifact_count
