#!/usr/bin/env bash
# Runs one command under valgrind memcheck for tests/robust/CMakeLists.txt:
#   valgrind_run.sh VALGRIND SUPPRESSIONS EXPECTED_RC PATTERN -- COMMAND [ARGS...]
# Passes when memcheck finds no error (--error-exitcode=1: invalid reads or
# writes, uses of uninitialised values, invalid frees, and definitely or
# indirectly lost blocks), the command exits EXPECTED_RC, and its standard
# output and error together match the extended regular expression PATTERN.
set -uo pipefail
vg=$1 supp=$2 want=$3 pattern=$4
shift 4
[ "$1" = "--" ] && shift
log=$(mktemp)
"$vg" --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
  --suppressions="$supp" -q "$@" >"$log" 2>&1
rc=$?
cat "$log"
if ! grep -E -q -- "$pattern" "$log"; then
  echo "valgrind_run: output does not match /$pattern/"
  rm -f "$log"
  exit 1
fi
rm -f "$log"
if [ "$rc" -ne "$want" ]; then
  echo "valgrind_run: exit status $rc, expected $want (1 = memcheck found errors)"
  exit 1
fi
exit 0
