#!/usr/bin/env python3
"""ABI guard rails on the built libtodre.so (tests/abi/CMakeLists.txt).

  check_library.py symbols LIB MAP HEADER VERSION
      the exported dynamic symbols == the names under `global:` in the linker
      map == the TODRE_API functions declared in the public header; each
      symbol carries the version node the map gives it; the library defines
      exactly the map's nodes; every node is TODRE_<major>.<minor> of this
      major version with minor <= VERSION's (so 1.0.x exports only TODRE_1.0)
  check_library.py dynamic LIB SONAME
      the SONAME, and no CUDA library in DT_NEEDED (the CUDA backend is a
      dlopen'ed module)
"""
import re
import subprocess
import sys


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def strip_c_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def map_symbols(path):
    """({symbol: version node}, [nodes]) for every name under a `global:`."""
    text = strip_c_comments(open(path).read())
    text = re.sub(r"#[^\n]*", "", text)
    symbols, nodes = {}, []
    for node, body in re.findall(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}", text, flags=re.S):
        nodes.append(node)
        section = None
        for item in re.split(r"[;\s]+", body):
            if item.endswith(":"):
                section = item[:-1]
            elif item and section == "global":
                if item in symbols:
                    sys.exit(f"FAIL: {item} appears in two map nodes")
                symbols[item] = node
    return symbols, nodes


def header_functions(path):
    """Names of the functions the header declares with TODRE_API."""
    text = strip_c_comments(open(path).read())
    names = []
    for decl in re.findall(r"\bTODRE_API\b(.*?);", text, flags=re.S):
        m = re.search(r"(\w+)\s*\(", decl)
        if not m:
            sys.exit(f"FAIL: cannot parse the TODRE_API declaration: {decl.strip()}")
        names.append(m.group(1))
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        sys.exit(f"FAIL: declared twice in {path}: {', '.join(dups)}")
    return set(names)


def exported_symbols(lib):
    """({symbol: version}, {version definitions}) of the defined dynamic symbols."""
    out, defs = {}, set()
    for line in run("nm", "-D", "--defined-only", lib).splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        kind, name = fields[-2], fields[-1]
        if kind == "A":  # the version definition itself (e.g. TODRE_1.0)
            defs.add(name.split("@")[0])
            continue
        sym, _, version = name.partition("@")
        out[sym] = version.lstrip("@")
    return out, defs


def check_symbols(lib, map_path, header, version):
    want, nodes = map_symbols(map_path)
    declared = header_functions(header)
    have, defs = exported_symbols(lib)
    errors = []
    if not want:
        errors.append(f"no global symbols parsed from {map_path}")
    if not declared:
        errors.append(f"no TODRE_API functions parsed from {header}")
    for sym in sorted(set(have) - set(want)):
        errors.append(f"exported but not in the map: {sym}")
    for sym in sorted(set(want) - set(have)):
        errors.append(f"in the map but not exported: {sym}")
    for sym in sorted(declared - set(have)):
        errors.append(f"declared in {header} but not exported: {sym}")
    for sym in sorted(set(have) - declared):
        errors.append(f"exported but not a TODRE_API function of {header}: {sym}")
    for sym in sorted(set(want) & set(have)):
        if have[sym] != want[sym]:
            errors.append(f"{sym}: version '{have[sym]}', map node '{want[sym]}'")
    if defs != set(nodes):
        errors.append(f"version definitions {sorted(defs)}, map nodes {sorted(nodes)}")
    major, minor = (int(x) for x in version.split(".")[:2])
    base = f"TODRE_{major}.0"
    if base not in nodes:
        errors.append(f"the map has no node {base}")
    for node in nodes:
        m = re.fullmatch(r"TODRE_(\d+)\.(\d+)", node)
        if not m or int(m.group(1)) != major or int(m.group(2)) > minor:
            errors.append(f"map node {node} is not TODRE_{major}.0 .. TODRE_{major}.{minor}")
    if errors:
        sys.exit("FAIL:\n  " + "\n  ".join(errors))
    print(f"ok: {len(have)} exported symbols == {map_path} == the TODRE_API functions of "
          f"{header}; version nodes {', '.join(nodes)}")


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
    if len(sys.argv) == 6 and sys.argv[1] == "symbols":
        check_symbols(*sys.argv[2:6])
    elif len(sys.argv) == 4 and sys.argv[1] == "dynamic":
        check_dynamic(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
