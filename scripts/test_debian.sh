#!/usr/bin/env bash
# The Debian packages, as a distribution user gets them (docs/building.md,
# "Debian packages"):
#   1. copy the source tree to a temporary directory and build the binary
#      packages there with dpkg-buildpackage (tests off: profile nocheck; no
#      CUDA package: profile pkg.todre.nocuda, unless TODRE_DEB_CUDA=1)
#   2. the symbols file matches the built library exactly, lintian reports no
#      error and no warning that debian/*lintian-overrides does not explain
#   3. install the packages (apt-get), then build and run consumers against
#      the installed system paths: `cc ... $(pkg-config --cflags --libs todre)`
#      and CMake find_package(todre); run `todre info`; find the man page
#   4. purge the packages and anything their installation pulled in, and check
#      that the machine's package set is as before.
# Needs root (it installs packages) and Debian's dpkg-dev, debhelper and
# lintian (installed here if missing). Costs about 2-3 minutes on 2 cores,
# most of it the library build and lintian.
#
# A libtodre installed with `cmake --install` under /usr/local would shadow
# the packages for the consumer checks (pkg-config, CMake, the compiler and
# the dynamic linker all search /usr/local first), so the test would check
# that copy instead. When one is found, the consumer checks run in a private
# mount namespace with /usr/local hidden (unshare -m; the machine's own view
# is untouched); each check also verifies which files it used.
#
# Usage: scripts/test_debian.sh [JUNIT.xml]; exit status 0 iff all checks pass.
# TODRE_DEB_CUDA=1 also builds and installs libtodre1-backend-cuda (needs nvcc).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
junit=${1:-}
[ -n "$junit" ] && junit=$(realpath -m "$junit")
JOBS=${JOBS:-2}
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$multiarch
packages=(libtodre1 libtodre-dev todre-tools)
[ "${TODRE_DEB_CUDA:-0}" = 1 ] && packages+=(libtodre1-backend-cuda)

# ---- the consumer checks, run in this process or in a mount namespace ------
# $1 = work dir; writes "name<TAB>status<TAB>seconds" lines to $1/consumer.results
# and each check's output to $1/logs/<name>.log.
consumer_checks() {
  local work=$1 results=$1/consumer.results
  : >"$results"
  # System pkg-config directories only: PKG_CONFIG_PATH or a user's setting
  # must not point this at another todre.pc.
  unset PKG_CONFIG_PATH
  export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig
  unset LD_LIBRARY_PATH CMAKE_PREFIX_PATH todre_DIR

  ccheck() {
    local name=$1 t0=$SECONDS rc; shift
    ("$@") >"$work/logs/$name.log" 2>&1; rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$results"
  }
  # The library a program loads at run time must be the package's.
  uses_package_lib() {
    local lib
    lib=$(ldd "$1" | awk '$1 == "libtodre.so.1" {print $3}')
    echo "$1 loads libtodre.so.1 from: $lib"
    [ "$(realpath "$lib")" = "$(realpath "$libdir/libtodre.so.1")" ]
  }
  kept_288() { local out; out=$("$1") || return 1; echo "$out"; grep -q '^kept 288 of 2880 tokens' <<<"$out"; }

  pkgconfig_consumer() {
    set -e
    echo "pkg-config: libdir $(pkg-config --variable=libdir todre), version $(pkg-config --modversion todre)"
    [ "$(pkg-config --variable=libdir todre)" = "$libdir" ]
    [ "$(pkg-config --modversion todre)" = "$version" ]
    local d=$work/pc
    mkdir -p "$d"
    # shellcheck disable=SC2046
    cc -std=c99 -Wall -Wextra -Werror -MD -MF "$d/quickstart.d" "$root/examples/c/quickstart.c" \
       -o "$d/quickstart" $(pkg-config --cflags --libs todre)
    # The header the compiler read is the package's.
    grep -o '[^ ]*/todre/todre\.h' "$d/quickstart.d" | sort -u | tee "$d/header"
    [ "$(cat "$d/header")" = /usr/include/todre/todre.h ]
    uses_package_lib "$d/quickstart"
    kept_288 "$d/quickstart"
  }
  cmake_consumer() {
    set -e
    local d=$work/cmake
    cmake -S "$root/tests/packaging" -B "$d" -DEXAMPLES_DIR="$root/examples" \
          -DEXPECT_TODRE_DIR="$libdir/cmake/todre" -DCMAKE_BUILD_TYPE=Release
    cmake --build "$d" -j "$JOBS"
    find "$d/CMakeFiles" -name '*.o.d' -exec grep -h -o '[^ ]*/todre/todre\.h' {} + | sort -u | tee "$d/header"
    [ "$(cat "$d/header")" = /usr/include/todre/todre.h ]
    uses_package_lib "$d/consumer_c"
    uses_package_lib "$d/consumer_cpp"
    kept_288 "$d/consumer_c"
    kept_288 "$d/consumer_cpp"
  }
  tool_info() {
    set -e
    local out
    [ "$(command -v todre)" = /usr/bin/todre ]
    uses_package_lib /usr/bin/todre
    out=$(todre info)
    echo "$out"
    grep -q "^libtodre $version (todre tool built against $version)" <<<"$out"
    grep -q '^backend cpu: available, 1 device; built in' <<<"$out"
    [ "$(todre --version)" = "todre $version" ]
  }
  # The directory libtodre scans for modules is the one the backend packages
  # install into, and pkg-config and CMake report it.
  backend_dir() {
    set -e
    local dir=$libdir/todre out
    echo "pkg-config backenddir: $(pkg-config --variable=backenddir todre)"
    [ "$(pkg-config --variable=backenddir todre)" = "$dir" ]
    grep -q "backend directory $dir\$" "$work/logs/consumer.cmake.log"
    grep -qaF "$dir" "$libdir/libtodre.so.1"
    if dpkg-query -W -f='${Status}' libtodre1-backend-cuda 2>/dev/null | grep -q 'ok installed'; then
      out=$(todre info)
      echo "$out"
      # Listed (available or not: no GPU needed), loaded from the backend
      # directory. The path may read /lib/... on a merged-/usr system (the
      # library's own directory is scanned first), so compare real paths.
      local module
      module=$(sed -n 's/^backend cuda: .*; module \(.*\)$/\1/p' <<<"$out")
      [ -n "$module" ] && [ "$(realpath -m "$module")" = "$(realpath -m "$dir/libtodre-cuda.so")" ]
    else
      echo "libtodre1-backend-cuda not built (profile pkg.todre.nocuda): no module to look for"
    fi
  }
  manpage() {
    set -e
    local page
    page=$(man -w todre)
    echo "man -w todre: $page"
    [ "$page" = /usr/share/man/man1/todre.1.gz ]
    # It renders without groff warnings and says what the tool does.
    LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>"$work/man.warnings" | grep -q 'todre select'
    cat "$work/man.warnings"
    [ ! -s "$work/man.warnings" ]
  }

  ccheck consumer.pkgconfig pkgconfig_consumer
  ccheck consumer.cmake cmake_consumer
  ccheck tool.info tool_info
  ccheck backend_dir backend_dir
  ccheck tool.manpage manpage
}

if [ "${1:-}" = --consumer-checks ]; then
  # Re-invoked inside the mount namespace (see the top).
  version=$3 root=$4
  consumer_checks "$2"
  exit 0
fi

# ---- bookkeeping --------------------------------------------------------------
work=$(mktemp -d /tmp/todre-deb.XXXXXX)
mkdir -p "$work/logs"
names=() statuses=() times=()
record() { names+=("$1"); statuses+=("$2"); times+=("$3"); \
           if [ "$2" = 0 ]; then echo "  PASS $1 (${3}s)"; else echo "  FAIL $1 (${3}s): $work/logs/$1.log"; tail -n 25 "$work/logs/$1.log" | sed 's/^/    /'; fi; }
check() {
  local name=$1 t0=$SECONDS rc; shift
  ("$@") >"$work/logs/$name.log" 2>&1; rc=$?
  record "$name" "$rc" "$((SECONDS - t0))"
  return "$rc"
}
# A check the rest cannot do without. Never call check in a || or && list:
# bash would then ignore `set -e` in the check's functions.
must() { check "$@"; local rc=$?; [ "$rc" = 0 ] || finish; }
xml_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g' | tr -d '\000-\010\013\014\016-\037'; }
write_junit() {
  [ -n "$junit" ] || return 0
  local i nfail=0
  for i in "${!names[@]}"; do [ "${statuses[$i]}" = 0 ] || nfail=$((nfail + 1)); done
  mkdir -p "$(dirname "$junit")"
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuite name=\"debian\" tests=\"${#names[@]}\" failures=\"$nfail\" errors=\"0\" skipped=\"0\">"
    for i in "${!names[@]}"; do
      echo "  <testcase classname=\"debian\" name=\"${names[$i]}\" time=\"${times[$i]}\">"
      if [ "${statuses[$i]}" != 0 ]; then
        echo "    <failure message=\"exit status ${statuses[$i]}\">"
        tail -n 60 "$work/logs/${names[$i]}.log" 2>/dev/null | xml_escape
        echo "    </failure>"
      fi
      echo "  </testcase>"
    done
    echo "</testsuite>"
  } >"$junit"
}
installed_set() { dpkg-query -W -f='${Package}:${Architecture} ${db:Status-Status}\n' | awk '$2 == "installed" {print $1}' | sort; }
is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }

we_installed=0
cleanup() {
  if [ "$we_installed" = 1 ]; then
    apt-get purge -y "${packages[@]}" >>"$work/logs/cleanup.log" 2>&1 || true
  fi
}
trap cleanup EXIT

finish() {
  local i nfail=0
  # The build tree and packages are large; the logs stay.
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work/src" "$work/pc" "$work/cmake"
  write_junit
  for i in "${!names[@]}"; do [ "${statuses[$i]}" = 0 ] || nfail=$((nfail + 1)); done
  echo "test_debian: $(( ${#names[@]} - nfail )) passed, $nfail failed ($((SECONDS))s; logs in $work)"
  [ "$nfail" = 0 ]
  exit $?
}

# ---- preconditions --------------------------------------------------------------
t0=$SECONDS
preconditions() {
  set -e
  [ "$(id -u)" = 0 ] || { echo "needs root: it installs and removes packages"; return 1; }
  local p
  for p in "${packages[@]}" libtodre1-backend-cuda; do
    if is_installed "$p"; then
      echo "$p is already installed: this test installs and purges the packages itself; remove it first"
      return 1
    fi
  done
  local missing=()
  for p in dpkg-dev debhelper lintian; do is_installed "$p" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  fi
}
must preconditions preconditions
before=$(installed_set)

# ---- 1. build ----------------------------------------------------------------------
version=$(sed -n 's/^project(todre VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
src=$work/src/libtodre-$version
copy_tree() {
  set -e
  mkdir -p "$src"
  # The working tree as a clean clone has it: tracked and untracked-but-not-
  # ignored files (no build directories); without git, everything but those.
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$root" && git ls-files -z -c -o --exclude-standard | xargs -0 -r tar -c --no-recursion --ignore-failed-read -f - ) | tar -x -C "$src"
  else
    (cd "$root" && tar -c --exclude='./build*' --exclude='./.git' --exclude='./obj-*' -f - .) | tar -x -C "$src"
  fi
  ls "$src/debian/control"
}
must source.copy copy_tree

# The changelog's version is the library's (CMakeLists.txt's project()).
check source.version bash -c "v=\$(cd '$src' && dpkg-parsechangelog -S Version); echo \"debian/changelog \$v, CMakeLists.txt $version\"; [ \"\$v\" = '$version' ]"

profiles=nocheck
[ "${TODRE_DEB_CUDA:-0}" = 1 ] || profiles=nocheck,pkg.todre.nocuda
build() {
  set -e
  cd "$src"
  DEB_BUILD_OPTIONS="nocheck parallel=$JOBS" dpkg-buildpackage -us -uc -b -P"$profiles"
}
must build build
ls "$work"/src/*.deb

# Exactly the symbols of debian/libtodre1.symbols, no more, no fewer (the
# build itself only fails on disappeared symbols): a function added to the
# library must be added to the file with the version that introduced it.
check symbols bash -c "cd '$src' && dpkg-gensymbols -plibtodre1 -Pdebian/libtodre1 -v'$version' -c4 \
                      -Idebian/libtodre1.symbols -O'$work/libtodre1.symbols.out'"

# Errors and warnings fail; what debian/*lintian-overrides accepts is listed
# with its reason in docs/building.md.
check lintian lintian --fail-on error,warning --display-info "$work"/src/libtodre_"${version}"_*.changes

# ---- 3. install and consume -----------------------------------------------------------
install_debs() {
  set -e
  local debs=() p
  for p in "${packages[@]}"; do debs+=("$(ls "$work"/src/"${p}"_"${version}"_*.deb)"); done
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${debs[@]}"
  for p in "${packages[@]}"; do is_installed "$p"; done
}
we_installed=1
check install install_debs

shadowed=$(ls -d /usr/local/lib/libtodre.so* /usr/local/lib/*/libtodre.so* /usr/local/include/todre \
           /usr/local/lib/pkgconfig/todre.pc /usr/local/lib/*/pkgconfig/todre.pc \
           /usr/local/lib/cmake/todre /usr/local/lib/*/cmake/todre 2>/dev/null | head -n 3)
if [ -n "$shadowed" ]; then
  echo "test_debian: a libtodre under /usr/local shadows the packages ($(echo $shadowed)...):"
  echo "  the consumer checks run with /usr/local hidden (unshare -m)"
  unshare -m bash -c 'mount -t tmpfs -o ro,size=1m tmpfs /usr/local && exec bash "$0" --consumer-checks "$1" "$2" "$3"' \
    "$here/test_debian.sh" "$work" "$version" "$root" >"$work/logs/namespace.log" 2>&1
  ns_rc=$?
  record consumer.namespace "$ns_rc" 0
else
  consumer_checks "$work"
fi
if [ -f "$work/consumer.results" ]; then
  while IFS=$'\t' read -r name rc secs; do record "$name" "$rc" "$secs"; done <"$work/consumer.results"
else
  echo "no consumer results" >"$work/logs/consumer.results.log"
  record consumer.results 1 0
fi

# ---- 4. remove, and leave the machine as it was -----------------------------------------
purge() {
  set -e
  DEBIAN_FRONTEND=noninteractive apt-get purge -y "${packages[@]}"
  # Dependencies the installation pulled in (none when deps.sh ran first).
  local extra
  extra=$(comm -13 <(echo "$before") <(installed_set))
  if [ -n "$extra" ]; then
    echo "also purging what the installation pulled in: $extra"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get purge -y $extra
  fi
  diff <(echo "$before") <(installed_set)
  ! ls "$libdir"/libtodre* /usr/include/todre /usr/bin/todre 2>/dev/null
}
check purge purge
[ "${statuses[-1]}" != 0 ] || we_installed=0

finish
