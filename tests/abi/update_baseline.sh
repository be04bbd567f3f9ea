#!/usr/bin/env bash
# Record the ABI baseline tests/abi/baseline/todre-<MAJOR>.<MINOR>.dump (and
# .enums) of a release from a build tree (configure and build libtodre
# first). Run it once per minor release, when its ABI is final; the
# compliance check (check_abi.sh, ctest abi.compliance) then guards every
# later build of that major version against every recorded release. Never
# regenerate an existing baseline to make an incompatible change pass.
#
# usage: tests/abi/update_baseline.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: update_baseline.sh BUILD_DIR}" && pwd)
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
header=$build_dir/include/todre/todre_version.h
[ -f "$header" ] || { echo "error: $header missing: configure $build_dir first" >&2; exit 1; }
version=$(sed -n 's/^#define TODRE_VERSION_STRING "\(.*\)"/\1/p' "$header")
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
lib=$build_dir/libtodre.so.$major
out=$source_dir/tests/abi/baseline/todre-$major.$minor.dump
bash "$source_dir/tests/abi/abi_dump.sh" "$lib" "$version" "$source_dir" "$build_dir" "$out"
echo "baseline written: $out and ${out%.dump}.enums (library $version); commit them with the header they describe"
