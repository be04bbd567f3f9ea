#!/usr/bin/env bash
# Compile every public header on its own (included twice, to check the guard)
# with a strict compiler, so that no header relies on another being included
# first, and C and C++ users both get warning-free builds.
#
# usage: check_headers.sh COMPILER c|c++ STD INCLUDE_DIR
set -euo pipefail
compiler=$1 lang=$2 std=$3 include_dir=$4

if [ -z "$compiler" ] || ! command -v "$compiler" >/dev/null; then
  echo "FAIL: no $lang compiler found; install one (g++: see docs/building.md)" >&2
  exit 1
fi
flags=(-std="$std" -Wall -Wextra -Werror -pedantic-errors -Wundef -Wshadow -Wcast-qual)
if [ "$lang" = c ]; then
  flags+=(-Wstrict-prototypes -Wmissing-prototypes -Wc++-compat)
else
  flags+=(-Wold-style-cast -Wzero-as-null-pointer-constant)
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
count=0
for header in "$include_dir"/todre/*.h; do
  name=todre/$(basename "$header")
  printf '#include <%s>\n#include <%s>\nint main(void) { return 0; }\n' "$name" "$name" >"$tmp/tu"
  if "$compiler" -x "$lang" "${flags[@]}" -I "$include_dir" -fsyntax-only "$tmp/tu"; then
    count=$((count + 1))
  else
    echo "FAIL: $name as $lang ($std)" >&2
    status=1
  fi
done
[ "$count" -gt 0 ] || [ "$status" -ne 0 ] || { echo "FAIL: no headers in $include_dir" >&2; exit 1; }
[ "$status" -ne 0 ] || echo "ok: $count headers compile cleanly as $lang ($std)"
exit "$status"
