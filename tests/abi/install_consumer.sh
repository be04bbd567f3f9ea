#!/usr/bin/env bash
# Install the current build tree into a fresh prefix and build an out-of-tree
# consumer against it three ways: a plain compiler line from pkg-config, CMake
# pkg_check_modules, and CMake find_package(todre). Each consumer must build
# with only the installed files and print the selection NumPy predicts.
#
# usage: install_consumer.sh BUILD_DIR SOURCE_DIR WORK_DIR CMAKE CC LIBDIR INCLUDEDIR DATADIR
#                            [SANITIZE]
set -euo pipefail

build_dir=$1 source_dir=$2 work=$3 cmake=$4 cc=$5 libdir=$6 includedir=$7 datadir=$8
sanitize=${9:-}

fail() { echo "FAIL: $*" >&2; exit 1; }

for dir in "$libdir" "$includedir" "$datadir"; do
  case "$dir" in
    /*) fail "CMAKE_INSTALL_LIBDIR/INCLUDEDIR/DATADIR are absolute ($libdir, $includedir," \
             "$datadir): a test install into a temporary prefix is impossible" ;;
  esac
done

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
"$cmake" --install "$build_dir" --prefix "$prefix" >"$work/install.log" \
  || { cat "$work/install.log" >&2; fail "cmake --install"; }

# ---- what the install must contain ------------------------------------------
version_h=$prefix/$includedir/todre/todre_version.h
[ -f "$version_h" ] || fail "not installed: $includedir/todre/todre_version.h"
vdef() { sed -n "s/^#define TODRE_VERSION_$1 \\(.*\\)/\\1/p" "$version_h"; }
major=$(vdef MAJOR)
version=$(vdef STRING | tr -d '"')
[ -n "$major" ] && [ -n "$version" ] || fail "todre_version.h defines no version"
soname=libtodre.so.$major
for f in "$libdir/libtodre.so" "$libdir/$soname" \
         "$includedir/todre/todre.h" "$includedir/todre/todre_export.h" \
         "$includedir/todre/dlpack.h" "$includedir/todre/todre_version.h" \
         "$datadir/doc/todre/LICENSE.dlpack" \
         "$libdir/pkgconfig/todre.pc" \
         "$libdir/cmake/todre/todreConfig.cmake" \
         "$libdir/cmake/todre/todreConfigVersion.cmake" \
         "$libdir/cmake/todre/todreTargets.cmake"; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
[ "$(readlink "$prefix/$libdir/libtodre.so")" = "$soname" ] \
  || fail "libtodre.so must link to the SONAME $soname"
# The installed header set is the public API; internal headers (backend
# table, job structs, dtype enums) are not part of the ABI.
extra=$(cd "$prefix/$includedir/todre" && ls | grep -v -x -e todre.h -e todre_export.h \
  -e dlpack.h -e todre_version.h || true)
[ -z "$extra" ] || fail "unexpected installed headers: $extra"
# The installed headers compile on their own, from the prefix alone.
printf '#include <todre/todre.h>\nint main(void) { return TODRE_VERSION_MAJOR == %s ? 0 : 1; }\n' \
  "$major" >"$work/alone.c"
"$cc" -std=c99 -Wall -Wextra -Werror -pedantic -I "$prefix/$includedir" -c "$work/alone.c" \
  -o "$work/alone.o" || fail "the installed todre.h does not compile on its own"

pc=$prefix/$libdir/pkgconfig/todre.pc
# Only what consumers link against matters (the prefix itself may contain "cuda").
if grep -n -i -E '^(Libs|Libs\.private|Requires|Requires\.private|Cflags):.*cuda' "$pc"; then
  fail "todre.pc makes consumers depend on CUDA"
fi
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
pcvar() { pkg-config --variable="$1" todre; }
[ "$(pcvar prefix)" = "$prefix" ] || fail "todre.pc prefix=$(pcvar prefix), want $prefix"
[ "$(pcvar libdir)" = "$prefix/$libdir" ] || fail "todre.pc libdir=$(pcvar libdir)"
[ "$(pcvar includedir)" = "$prefix/$includedir" ] || fail "todre.pc includedir=$(pcvar includedir)"
[ "$(pkg-config --modversion todre)" = "$version" ] \
  || fail "todre.pc version $(pkg-config --modversion todre) differs from todre_version.h's $version"

# The CMake package must be relocatable and must not drag CUDA into consumers.
cmake_files=("$prefix/$libdir"/cmake/todre/*.cmake)
if grep -n -E 'CUDA::|CUDAToolkit|cudart|cublas|find_dependency' "${cmake_files[@]}"; then
  fail "the CMake package refers to CUDA or to dependencies"
fi
# (The prefix itself lies inside the build tree, so it is blanked out first.)
if cat "${cmake_files[@]}" "$pc" | sed "s|$prefix|PREFIX|g" \
     | grep -n -F -e "$build_dir" -e "$source_dir"; then
  fail "installed package files refer to the build or source tree"
fi

# ---- consumers ------------------------------------------------------------------
san=()
[ -z "$sanitize" ] || san=("-fsanitize=$sanitize")
cflags=(-std=c99 -Wall -Wextra -Werror -pedantic "${san[@]}")
expected=$(printf 'todre %s (%s)\nselection: 2 4 0\nkept: 0 2 4' "$version" \
  "$(awk '/^#define TODRE_VERSION_(MAJOR|MINOR|PATCH)/ { v = v * 100 + $3 } END { print v }' \
      "$version_h")")

# $1: name, $2: binary, rest: env assignments for the run.
check_run() {
  local name=$1 bin=$2
  shift 2
  local out
  out=$(env -u LD_LIBRARY_PATH "$@" "$bin") || fail "$name: consumer exited with $?"
  [ "$out" = "$expected" ] || fail "$name: output differs:"$'\n'"$out"$'\n'"expected:"$'\n'"$expected"
  # It must have run against the installed library, not the build tree's.
  env -u LD_LIBRARY_PATH "$@" ldd "$bin" | grep -F "$prefix/$libdir/$soname" >/dev/null \
    || fail "$name: not resolved to the installed libtodre: $(env "$@" ldd "$bin" | grep todre)"
  echo "ok: $name"
}

# 1. The Makefile way: compiler line from pkg-config, library found through
#    LD_LIBRARY_PATH (a .pc carries no rpath).
read -r -a pc_flags <<<"$(pkg-config --cflags --libs todre)"
"$cc" "${cflags[@]}" -o "$work/consumer-pc" "$source_dir/tests/abi/consumer/main.c" "${pc_flags[@]}" \
  || fail "pkg-config consumer: compile failed"
check_run "pkg-config + cc" "$work/consumer-pc" "LD_LIBRARY_PATH=$prefix/$libdir"

# 2./3. CMake, both ways; the CMake build tree gets an rpath to the imported
#    library, so these run without LD_LIBRARY_PATH.
for via in pkg-config cmake; do
  bdir=$work/consumer-cmake-$via
  CFLAGS="${cflags[*]}" "$cmake" -S "$source_dir/tests/abi/consumer" -B "$bdir" \
    -DCMAKE_C_COMPILER="$cc" -DTODRE_CONSUMER_VIA="$via" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$bdir.log" 2>&1 \
    || { cat "$bdir.log" >&2; fail "CMake consumer via $via: configure failed"; }
  "$cmake" --build "$bdir" >>"$bdir.log" 2>&1 \
    || { cat "$bdir.log" >&2; fail "CMake consumer via $via: build failed"; }
  check_run "CMake + $via" "$bdir/consumer"
done
echo "PASS: installed into $prefix; 3 consumers built and ran"
