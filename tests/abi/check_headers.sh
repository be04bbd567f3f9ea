#!/usr/bin/env bash
# Compile every public header on its own (included twice, to check the guard)
# with a strict compiler, so that no header relies on another being included
# first, and C and C++ users both get warning-free builds. The public headers
# are those of INCLUDE_DIR/todre (todre.h, todre_export.h, the vendored
# dlpack.h) and of each GENERATED_DIR/todre (todre_version.h, configured by
# CMake into <build>/include); every directory is on the include path, as
# after an install.
#
# usage: check_headers.sh COMPILER c|c++ STD INCLUDE_DIR [GENERATED_DIR...]
set -euo pipefail
compiler=$1 lang=$2 std=$3
shift 3
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || { echo "usage: check_headers.sh COMPILER c|c++ STD INCLUDE_DIR..." >&2; exit 2; }

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
includes=()
for dir in "${dirs[@]}"; do
  includes+=(-I "$dir")
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
count=0
# todre.h includes todre_version.h: it must be among the headers found
[ -n "$(find "${dirs[@]}" -path '*/todre/todre_version.h' 2>/dev/null)" ] || {
  echo "FAIL: no todre/todre_version.h in ${dirs[*]} (configure the build first)" >&2
  exit 1
}
for dir in "${dirs[@]}"; do
  for header in "$dir"/todre/*.h; do
    [ -e "$header" ] || continue
    name=todre/$(basename "$header")
    printf '#include <%s>\n#include <%s>\nint main(void) { return 0; }\n' "$name" "$name" >"$tmp/tu"
    if "$compiler" -x "$lang" "${flags[@]}" "${includes[@]}" -fsyntax-only "$tmp/tu"; then
      count=$((count + 1))
    else
      echo "FAIL: $name as $lang ($std)" >&2
      status=1
    fi
  done
done
# The experimental section (zstd's STATIC_LINKING_ONLY model): usable when
# TODRE_EXPERIMENTAL_API is defined before the first include, and when the
# header is included again after defining it; its macros compile cleanly.
use='int todre_use_exp(void);
int todre_use_exp(void) { todre_param p = TODRE_CONTEXT_EXP_SELECT_STRATEGY; return p == TODRE_SELECT_KEEP; }
int main(void) { return todre_use_exp(); }'
printf '#define TODRE_EXPERIMENTAL_API\n#include <todre/todre.h>\n%s\n' "$use" >"$tmp/exp1"
printf '#include <todre/todre.h>\n#define TODRE_EXPERIMENTAL_API\n#include <todre/todre.h>\n%s\n' \
  "$use" >"$tmp/exp2"
for tu in exp1 exp2; do
  what="todre.h with TODRE_EXPERIMENTAL_API defined before the first include"
  [ "$tu" = exp1 ] || what="todre.h included again after defining TODRE_EXPERIMENTAL_API"
  if "$compiler" -x "$lang" "${flags[@]}" "${includes[@]}" -fsyntax-only "$tmp/$tu"; then
    count=$((count + 1))
  else
    echo "FAIL: $what, as $lang ($std)" >&2
    status=1
  fi
done

[ "$count" -ge 6 ] || [ "$status" -ne 0 ] || {
  echo "FAIL: $count headers found in ${dirs[*]}; expected todre.h, todre_export.h, dlpack.h," \
       "todre_version.h" >&2
  exit 1
}
[ "$status" -ne 0 ] || echo "ok: $count header translation units compile cleanly as $lang ($std)"
exit "$status"
