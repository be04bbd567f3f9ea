#!/usr/bin/env bash
# ctest abi.program_1_0: run the program built against the 1.0 headers with
# the library being tested, then check that its binary needs the symbol
# version node TODRE_1.0 and no later one (what 1.0 programs link to).
# usage: run_program_1_0.sh PROGRAM
set -euo pipefail
prog=$1
"$prog"
needs=$(readelf -V -W "$prog" | grep -o 'TODRE_[0-9.]*' | sort -u | tr '\n' ' ')
echo "symbol versions the program needs: $needs"
[ "$needs" = "TODRE_1.0 " ] || { echo "FAIL: expected TODRE_1.0 only" >&2; exit 1; }
