#!/bin/sh
# CUDA compiler launcher of libtodre-cuda (src/cuda/CMakeLists.txt): runs the
# compile command given as its arguments, keeps ptxas's resource report
# (the module is compiled with -Xptxas=-v) in <object>.ptxas next to the
# object, where the test cuda.no_register_spills reads it
# (check_spills.sh), and passes every other line of stderr through, so the
# build log shows warnings and errors as usual.
out=
prev=
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
done
if [ -z "$out" ]; then exec "$@"; fi
"$@" 2> "$out.ptxas.tmp"
rc=$?
grep -v -e '^ptxas info' -e '^ *[0-9]* bytes stack frame' "$out.ptxas.tmp" >&2
mv -f "$out.ptxas.tmp" "$out.ptxas"
exit $rc
