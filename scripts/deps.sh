#!/usr/bin/env bash
# Install everything libtodre needs to build and run its tests on a fresh
# Debian 12 machine (run as root, or as a user with sudo). Idempotent: what is present is skipped, so a second run
# takes seconds. Quiet; on a failure the tool's own output is shown.
#
#   cmake, gcc, make       build the library (C11) and the CLI
#   g++                    examples/cpp and the C++ header check (tests/abi)
#   pkg-config             finds OpenBLAS and CMocka; tests the installed todre.pc
#   libopenblas-dev        the CPU backend's BLAS (cblas_sgemm / sgemv)
#   libcmocka-dev          the C unit tests
#   clang                  the second compiler every build is tested with
#   libclang-rt-14-dev     libFuzzer and clang's sanitizer runtimes (fuzz.* tests in the
#                          clang build; a Recommends of clang, so named here)
#   valgrind               memcheck of the examples and the CLI (valgrind.* tests)
#   libomp-dev             LLVM's OpenMP runtime and Archer, its ThreadSanitizer tool
#                          (the TSan stage: libgomp's synchronisation is invisible to TSan)
#   abi-dumper, abi-compliance-checker
#                          the ABI check against tests/abi/baseline (abi.compliance)
#   dpkg-dev, debhelper, lintian   the Debian packages (scripts/test_debian.sh)
#   ninja-build            scikit-build-core's generator (the wheel, the vLLM venv's install)
#   python3, python3-pip   NumPy float64 references, pytest, the Python package
#   numpy, pytest, scikit-image (its photograph and features for the demo picture,
#                          examples/python/picture.py), and bindings/python/requirements-test.txt (its own reasons)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

APT_PACKAGES=(cmake gcc g++ clang libclang-rt-14-dev make pkg-config libopenblas-dev
              libcmocka-dev abi-dumper abi-compliance-checker valgrind libomp-dev python3
              python3-pip dpkg-dev debhelper lintian ninja-build)
PIP_PACKAGES=(numpy pytest scikit-image)
PIP_REQUIREMENTS=bindings/python/requirements-test.txt

log() { echo "deps: $*"; }
die() { echo "deps: error: $*" >&2; exit 1; }

# Runs a command quietly; shows its output only if it fails.
quiet() {
  local out
  out=$(mktemp)
  if ! "$@" >"$out" 2>&1; then
    cat "$out" >&2
    rm -f "$out"
    die "failed: $*"
  fi
  rm -f "$out"
}

install_apt_packages() {
  if ! command -v dpkg-query >/dev/null; then
    log "not a Debian system: install these yourself if missing: ${APT_PACKAGES[*]}"
    return
  fi
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || { log "system packages present"; return; }

  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo; install: ${missing[*]}"
    sudo=(sudo)
  fi
  log "apt-get install ${missing[*]}"
  quiet "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  quiet "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# PEP 668: a Debian-managed python3 refuses plain `pip install`; a pyenv, venv
# or conda python does not. Use --break-system-packages only where required
# (user site-packages, so Debian's own packages stay untouched).
pip_install() {
  local extra=()
  if python3 - <<'PY'
import os, sys, sysconfig
in_venv = sys.prefix != sys.base_prefix
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if managed and not in_venv else 1)
PY
  then
    extra=(--break-system-packages)
    [ "$(id -u)" -eq 0 ] || extra+=(--user)
  fi
  PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
    quiet python3 -m pip install -q --progress-bar off "${extra[@]}" "$@"
}

install_python_packages() {
  python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip (apt-get install python3-pip)"
  local args=("${PIP_PACKAGES[@]}")
  [ -f "$PIP_REQUIREMENTS" ] && args+=(-r "$PIP_REQUIREMENTS")
  log "pip install ${args[*]}"
  pip_install "${args[@]}"
}

# `deps.sh --pip ARGS...`: only pip-install ARGS the same way (scripts/test.sh
# uses it for ./bindings/python).
if [ "${1:-}" = "--pip" ]; then
  shift
  log "pip install $*"
  pip_install "$@"
  exit 0
fi

install_apt_packages
install_python_packages
log "ok ($(python3 --version 2>&1), cmake $(cmake --version | head -n1 | awk '{print $3}'))"
