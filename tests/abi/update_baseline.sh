#!/usr/bin/env bash
# Regenerate the ABI baseline tests/abi/baseline/todre-<MAJOR>.0.dump from a
# build tree (configure and build libtodre first). Run it once per major
# version, when the ABI is final (at the .0 release); the compliance check
# (check_abi.sh, ctest abi.compliance) then guards every later 1.x build
# against it. Never regenerate it to make an incompatible change pass.
#
# usage: tests/abi/update_baseline.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: update_baseline.sh BUILD_DIR}" && pwd)
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
header=$build_dir/include/todre/todre_version.h
[ -f "$header" ] || { echo "error: $header missing: configure $build_dir first" >&2; exit 1; }
version=$(sed -n 's/^#define TODRE_VERSION_STRING "\(.*\)"/\1/p' "$header")
major=${version%%.*}
lib=$build_dir/libtodre.so.$major
out=$source_dir/tests/abi/baseline/todre-$major.0.dump
bash "$source_dir/tests/abi/abi_dump.sh" "$lib" "$version" "$source_dir" "$build_dir" "$out"
echo "baseline written: $out and ${out%.dump}.enums (library $version); commit them with the header they describe"
