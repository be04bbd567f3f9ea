#!/bin/sh
# cuda.no_register_spills (tests/cuda/CMakeLists.txt): reads ptxas's resource report
# of every object of libtodre-cuda (<object>.ptxas, written at build time by
# ptxas_log.sh) and fails if any function spills registers on any
# architecture, if an object has no report, or if the reports list no
# function at all (so the check cannot pass by not looking). Prints the
# registers, stack and spills of every kernel.
#
# Usage: check_spills.sh OBJECT...
logs=
for obj in "$@"; do
  if [ ! -s "$obj.ptxas" ]; then
    echo "no ptxas report for $obj (expected $obj.ptxas; rebuild the module)"
    exit 1
  fi
  logs="$logs $obj.ptxas"
done
# shellcheck disable=SC2086
awk '
  /Compiling entry function/ {
    arch = $0; sub(/.* for \047/, "", arch); sub(/\047.*/, "", arch)
  }
  /Function properties for/ { fn = $0; sub(/.*Function properties for /, "", fn) }
  / bytes spill stores, / {
    line = $0; sub(/^ */, "", line)
    st = $0; sub(/ bytes spill stores.*/, "", st); sub(/.*, /, "", st)
    ld = $0; sub(/ bytes spill loads.*/, "", ld); sub(/.*, /, "", ld)
    n++; per_arch[arch]++
    pending = 1
    if (st + 0 > 0 || ld + 0 > 0) { bad++; mark = "SPILLS" } else mark = "ok"
    next
  }
  pending && /Used [0-9]+ registers/ {
    regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
    printf "%-6s %-7s %3s registers; %s  %s\n", mark, arch, regs, line, fn
    pending = 0
  }
  END {
    for (a in per_arch) printf "%s: %d functions\n", a, per_arch[a]
    if (n == 0) { print "no function in the ptxas reports"; exit 1 }
    printf "%d functions, %d spilling\n", n, bad
    exit bad > 0
  }' $logs
