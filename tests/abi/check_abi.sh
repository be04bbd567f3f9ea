#!/usr/bin/env bash
# ABI compatibility against the recorded baselines (ctest abi.compliance):
# dump the built library with abi-dumper and compare it with every
# tests/abi/baseline/todre-<MAJOR>.<MINOR>.dump of its major version (1.0,
# 1.1, ...: each release's ABI) using abi-compliance-checker.
# Any binary or source compatibility problem (a removed function, a changed
# signature or struct layout, ...) fails, and so does a removed or changed
# enumerator value (the baseline's .enums, enum_values.py); added functions,
# parameters and enumerators do not. Prints a one-line summary; the HTML
# report is BUILD_DIR/abi/compat_report.html. Exit 77 (skip) only when
# abi-dumper or abi-compliance-checker is not installed (scripts/deps.sh
# installs both).
#
# usage: [CC=compiler] check_abi.sh LIB VERSION SOURCE_DIR BUILD_DIR [BASELINE]
set -euo pipefail
lib=$1 version=$2 source_dir=$3 build_dir=$4
major=${version%%.*}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ $# -lt 5 ]; then
  # every recorded release of this major version, each in turn
  shopt -s nullglob
  baselines=("$source_dir"/tests/abi/baseline/todre-"$major".*.dump)
  [ ${#baselines[@]} -gt 0 ] || { echo "FAIL: no baseline todre-$major.*.dump" >&2; exit 1; }
  for b in "${baselines[@]}"; do
    bash "${BASH_SOURCE[0]}" "$lib" "$version" "$source_dir" "$build_dir" "$b" || exit $?
  done
  exit 0
fi
baseline=$5

for tool in abi-dumper abi-compliance-checker; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (scripts/deps.sh installs it)" >&2
    exit 77
  fi
done
for f in "$baseline" "${baseline%.dump}.enums"; do
  [ -f "$f" ] || { echo "FAIL: no baseline $f (tests/abi/update_baseline.sh)" >&2; exit 1; }
done

out=$build_dir/abi
mkdir -p "$out"
dump=$out/todre-$version.dump
bash "$here/abi_dump.sh" "$lib" "$version" "$source_dir" "$build_dir" "$dump" >/dev/null

name=$(basename "${baseline%.dump}")
report=$out/compat_report_$name.html
log=$out/compat_$name.log
set +e
abi-compliance-checker -l todre -old "$baseline" -new "$dump" -report-path "$report" >"$log" 2>&1
rc=$?
set -e
bin=$(sed -n 's/^Total binary compatibility problems: \([0-9]*\).*/\1/p' "$log")
src=$(sed -n 's/^Total source compatibility problems: \([0-9]*\).*/\1/p' "$log")
summary="$(sed -n 's/^Binary compatibility: //p' "$log") binary, $(sed -n 's/^Source compatibility: //p' \
  "$log") source compatible with $(basename "$baseline"): ${bin:-?} binary and ${src:-?} source problems"
enums=$(python3 "$here/enum_values.py" compare "${baseline%.dump}.enums" "${dump%.dump}.enums" 2>&1) \
  && enums_ok=1 || enums_ok=0
if [ "$rc" -ne 0 ] || [ -z "$bin" ] || [ -z "$src" ] || [ "$bin" -ne 0 ] || [ "$src" -ne 0 ]; then
  cat "$log" >&2
  echo "FAIL: $summary (abi-compliance-checker exit $rc); $enums; see $report" >&2
  exit 1
fi
if [ "$enums_ok" -ne 1 ]; then
  echo "FAIL: $summary, but $enums" >&2
  exit 1
fi
echo "ok: $summary; $enums; report $report"
