#!/usr/bin/env bash
# The C example in README.md must keep compiling against the public header,
# warning-free, so that what users copy first is never stale.
# usage: check_readme.sh CC README INCLUDE_DIR [GENERATED_INCLUDE_DIR...]
#   (the configured todre_version.h lives in <build>/include)
set -euo pipefail
cc=$1 readme=$2
shift 2
includes=()
for dir in "$@"; do
  includes+=(-I "$dir")
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^```c$/ { inside = 1; found = 1; next } /^```$/ { if (inside) exit } inside' "$readme" >"$tmp/readme.c"
[ -s "$tmp/readme.c" ] || { echo "FAIL: no \`\`\`c block in $readme" >&2; exit 1; }
"$cc" -std=c99 -Wall -Wextra -Werror -pedantic "${includes[@]}" -c "$tmp/readme.c" -o "$tmp/readme.o"
echo "ok: the C example of $readme compiles"
