#!/usr/bin/env bash
# Shared by check_abi.sh and update_baseline.sh: dump the public ABI of a
# built libtodre with abi-dumper (the library is built with -g).
#
# usage: [CC=compiler] abi_dump.sh LIB VERSION SOURCE_DIR BUILD_DIR OUT_DUMP
#   The public headers are include/todre/*.h of SOURCE_DIR plus the
#   configured BUILD_DIR/include/todre/todre_version.h, gathered into one
#   directory as after an install. Only what they declare is in the dump.
#   The dump must describe every TODRE_API function of todre.h, so that a
#   comparison is never vacuous. Next to it, OUT_DUMP minus .dump plus
#   .enums gets the value of every enumerator of the headers (enum_values.py:
#   abi-compliance-checker sees only enums used in signatures).
#   Exit 77 when abi-dumper is not installed.
set -euo pipefail
lib=$1 version=$2 source_dir=$3 build_dir=$4 out=$5

if ! command -v abi-dumper >/dev/null; then
  echo "SKIP: abi-dumper is not installed (scripts/deps.sh installs it)" >&2
  exit 77
fi
[ -f "$lib" ] || { echo "FAIL: $lib: no such library (build it first)" >&2; exit 1; }
sections=$(readelf -S -W "$lib")
case "$sections" in
  *.debug_info*) ;;
  *) echo "FAIL: $lib has no debug info; abi-dumper needs a -g build" >&2; exit 1 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/public/todre"
cp "$source_dir"/include/todre/*.h "$work/public/todre/"
cp "$build_dir/include/todre/todre_version.h" "$work/public/todre/"

mkdir -p "$(dirname "$out")"
if ! abi-dumper "$lib" -lver "$version" -public-headers "$work/public" -o "$out" \
     >"$work/dump.log" 2>&1; then
  cat "$work/dump.log" >&2
  echo "FAIL: abi-dumper $lib" >&2
  exit 1
fi

# Not vacuous: every public function is described.
declared=$(python3 - "$source_dir/include/todre/todre.h" <<'PY'
import re, sys
text = re.sub(r"/\*.*?\*/", " ", open(sys.argv[1]).read(), flags=re.S)
for decl in re.findall(r"\bTODRE_API\b(.*?);", text, flags=re.S):
    print(re.search(r"(\w+)\s*\(", decl).group(1))
PY
)
declared=$(echo "$declared" | sort -u)
dumped=$(grep -o "'ShortName' => 'todre_[A-Za-z0-9_]*'" "$out" | sed "s/.*=> '//; s/'$//" | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$dumped"))
if [ -z "$declared" ] || [ -n "$missing" ]; then
  echo "FAIL: the ABI dump of $lib lacks:" $missing >&2
  exit 1
fi
python3 "$(dirname "${BASH_SOURCE[0]}")/enum_values.py" dump "${CC:-cc}" "${out%.dump}.enums" \
  "$work/public" >/dev/null
echo "dumped $(echo "$dumped" | wc -l) public functions of $lib ($version) to $out"
