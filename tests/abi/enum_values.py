#!/usr/bin/env python3
"""The values of every enumerator of the public headers (and TODRE_MAX_RANK),
as the C compiler sees them: the pinned constants of the ABI.

abi-compliance-checker only compares enums that appear in a function
signature, and most of libtodre's (objective, pivot, order, token type,
decision, probe schedule) travel as int64_t parameter values or int32
array elements; so check_abi.sh compares this list with the baseline's
too.

  enum_values.py dump CC OUT INCLUDE_DIR...   write "NAME VALUE" lines
  enum_values.py compare BASELINE NEW         removed or changed -> exit 1
"""
import os
import re
import subprocess
import sys
import tempfile

HEADERS = ("todre/todre.h", "todre/dlpack.h")
MACROS = ("TODRE_MAX_RANK",)


def find(include_dirs, name):
    for d in include_dirs:
        path = os.path.join(d, name)
        if os.path.exists(path):
            return path
    sys.exit(f"FAIL: {name} not found in {include_dirs}")


def enumerators(path):
    text = re.sub(r"/\*.*?\*/", " ", open(path).read(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    names = []
    for body in re.findall(r"\benum\b[^{;]*\{(.*?)\}", text, flags=re.S):
        for item in body.split(","):
            m = re.match(r"\s*([A-Za-z_]\w*)", item)
            if m:
                names.append(m.group(1))
    return names


def dump(cc, out, include_dirs):
    names = []
    for h in HEADERS:
        names += enumerators(find(include_dirs, h))
    names += MACROS
    if len(set(names)) != len(names):
        sys.exit("FAIL: an enumerator name appears twice")
    src = "#include <stdio.h>\n#include <todre/todre.h>\nint main(void)\n{\n"
    src += "".join(f'    printf("%s %lld\\n", "{n}", (long long)({n}));\n' for n in names)
    src += "    return 0;\n}\n"
    with tempfile.TemporaryDirectory() as tmp:
        c, exe = os.path.join(tmp, "enums.c"), os.path.join(tmp, "enums")
        open(c, "w").write(src)
        cmd = [cc, "-std=c99", "-o", exe, c] + [f"-I{d}" for d in include_dirs]
        subprocess.run(cmd, check=True)
        lines = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    with open(out, "w") as f:
        f.write("".join(sorted(lines.splitlines(keepends=True))))
    print(f"{len(names)} enumerator values written to {out}")


def read(path):
    values = {}
    for line in open(path):
        name, value = line.split()
        values[name] = int(value)
    return values


def compare(baseline, new):
    old, cur = read(baseline), read(new)
    errors = [f"{n} removed (was {v})" for n, v in sorted(old.items()) if n not in cur]
    errors += [f"{n} = {cur[n]}, pinned {v}" for n, v in sorted(old.items()) if n in cur and cur[n] != v]
    added = sorted(set(cur) - set(old))
    if errors:
        print("FAIL: pinned constants changed: " + "; ".join(errors), file=sys.stderr)
        sys.exit(1)
    print(f"{len(old)} pinned constants unchanged" + (f", {len(added)} added" if added else ""))


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
