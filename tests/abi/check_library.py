#!/usr/bin/env python3
"""ABI guard rails on the built libtodre.so (tests/abi.cmake).

  check_library.py symbols LIB MAP   exported dynamic symbols == the names in the
                                     linker map, each with the version of its node
  check_library.py dynamic LIB SONAME  the SONAME, and no CUDA library in DT_NEEDED
                                     (the CUDA backend is a dlopen'ed module)
"""
import re
import subprocess
import sys


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def map_symbols(path):
    """{symbol: version node} for every name under a `global:` of the map."""
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    text = re.sub(r"#[^\n]*", "", text)
    symbols = {}
    for node, body in re.findall(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}", text, flags=re.S):
        section = None
        for item in re.split(r"[;\s]+", body):
            if item.endswith(":"):
                section = item[:-1]
            elif item and section == "global":
                if item in symbols:
                    sys.exit(f"FAIL: {item} appears in two map nodes")
                symbols[item] = node
    return symbols


def exported_symbols(lib):
    """{symbol: version} of the defined dynamic symbols, version nodes excluded."""
    out = {}
    for line in run("nm", "-D", "--defined-only", lib).splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        kind, name = fields[-2], fields[-1]
        if kind == "A":  # the version definition itself (e.g. TODRE_0.1)
            continue
        sym, _, version = name.partition("@")
        out[sym] = version.lstrip("@")
    return out


def check_symbols(lib, map_path):
    want = map_symbols(map_path)
    have = exported_symbols(lib)
    errors = []
    if not want:
        errors.append(f"no global symbols parsed from {map_path}")
    for sym in sorted(set(have) - set(want)):
        errors.append(f"exported but not in the map: {sym}")
    for sym in sorted(set(want) - set(have)):
        errors.append(f"in the map but not exported: {sym}")
    for sym in sorted(set(want) & set(have)):
        if have[sym] != want[sym]:
            errors.append(f"{sym}: version '{have[sym]}', map node '{want[sym]}'")
    if errors:
        sys.exit("FAIL:\n  " + "\n  ".join(errors))
    print(f"ok: {len(have)} exported symbols match {map_path}")


def check_dynamic(lib, soname):
    dyn = run("readelf", "-d", "-W", lib)
    names = re.findall(r"\(SONAME\)\s+Library soname: \[(.*?)\]", dyn)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", dyn)
    errors = []
    if names != [soname]:
        errors.append(f"SONAME {names}, want [{soname!r}]")
    cuda = [n for n in needed if re.match(r"lib(cuda|cudart|cublas|nvrtc|cublasLt)\b", n)]
    if cuda:
        errors.append(f"libtodre must load without CUDA, but needs {cuda}")
    if errors:
        sys.exit("FAIL: " + "; ".join(errors))
    print(f"ok: SONAME {soname}; NEEDED {', '.join(needed)}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "symbols":
        check_symbols(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "dynamic":
        check_dynamic(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
