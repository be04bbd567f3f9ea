#!/usr/bin/env python3
"""Check that the tables of docs/performance.md show the figures of the data
files in bench/results/.

    python3 bench/results/check_tables.py           # exit 1 with a diff if they disagree
    python3 bench/results/check_tables.py --write   # rewrite the tables from the data

Each table of docs/performance.md follows a marker line

    <!-- table: avx512 -->

and is rendered from the template of that name in bench/results/tables.tmpl:

    == avx512
    data z4 = cpu-zen4-2026-11-29.json
    | input | vs NumPy, k = 288 |
    |---|---|
    | f16 | {z4.runs.numpy_alg1.results.avx512.f16.k288.median:.2f}x |

`data ALIAS = FILE` names a JSON file of bench/results/. A placeholder
`{ALIAS.key.key...[|min|max][:format]}` is the value at that key path (a
list index is a key too); `|min` and `|max` take the smallest or largest
element of a list; the format is Python's format() spec. `{{` and `}}` are
literal braces; template lines starting with `#` are comments. The rendered
table is the text after the marker up to the first blank line.

Also checked: every table line of docs/performance.md follows a marker,
every template is used, and every data file has the keys machine, date,
commit and runs. Standard library only.
"""
import difflib
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, "docs", "performance.md")
TEMPLATES = os.path.join(HERE, "tables.tmpl")
REQUIRED = ("machine", "date", "commit", "runs")

MARKER = re.compile(r"^<!-- table: (?P<name>[\w.-]+) -->\n", re.M)
FIELD = re.compile(r"\{\{|\}\}|\{(?P<alias>[\w-]+)\.(?P<path>[^{}|:]+)"
                   r"(?:\|(?P<filt>min|max))?(?::(?P<fmt>[^{}]*))?\}")
DATA = re.compile(r"data\s+(?P<alias>[\w-]+)\s*=\s*(?P<file>\S+)\s*$")


class Fail(Exception):
    pass


def load(name, cache):
    if name not in cache:
        try:
            with open(os.path.join(HERE, name)) as f:
                cache[name] = json.load(f)
        except (OSError, ValueError) as e:
            raise Fail(f"{name}: {e}")
    return cache[name]


def templates():
    """{name: [lines]} from tables.tmpl."""
    out, name = {}, None
    with open(TEMPLATES) as f:
        for line in f.read().splitlines():
            if line.startswith("== "):
                name = line[3:].strip()
                if name in out:
                    raise Fail(f"tables.tmpl: template '{name}' defined twice")
                out[name] = []
            elif line.strip() and not line.startswith("#"):
                if name is None:
                    raise Fail(f"tables.tmpl: text before the first '== NAME': {line!r}")
                out[name].append(line)
    return out


def lookup(doc, path, where):
    v = doc
    for key in path.split("."):
        if isinstance(v, list) and key.isdigit() and int(key) < len(v):
            v = v[int(key)]
        elif isinstance(v, dict) and key in v:
            v = v[key]
        else:
            raise Fail(f"{where}: no key '{key}' in '{path}'")
    return v


def render(name, lines, cache):
    files, table = {}, []
    for line in lines:
        m = DATA.match(line.strip())
        if m:
            files[m["alias"]] = load(m["file"], cache)
        else:
            table.append(line)
    where = f"template '{name}'"

    def field(m):
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        if m["alias"] not in files:
            raise Fail(f"{where}: no 'data {m['alias']} = FILE' line")
        v = lookup(files[m["alias"]], m["path"], where)
        if m["filt"]:
            if not isinstance(v, list) or not v:
                raise Fail(f"{where}: '|{m['filt']}' needs a list at '{m['path']}'")
            v = min(v) if m["filt"] == "min" else max(v)
        if isinstance(v, (dict, list)) or v is None:
            raise Fail(f"{where}: '{m['path']}' is not a single value")
        try:
            return format(v, m["fmt"]) if m["fmt"] else str(v)
        except (ValueError, TypeError) as e:
            raise Fail(f"{where}: format '{m['fmt']}' of {v!r}: {e}")

    return [FIELD.sub(field, line) for line in table]


def main(argv):
    write = "--write" in argv[1:]
    cache = {}
    for name in sorted(os.listdir(HERE)):
        if name.endswith(".json"):
            doc = load(name, cache)
            missing = [k for k in REQUIRED if not isinstance(doc, dict) or k not in doc]
            if missing:
                raise Fail(f"{name}: missing {', '.join(missing)}")
    tmpl = templates()
    with open(DOC) as f:
        text = f.read()
    out, pos, covered, diffs, used = [], 0, set(), [], []
    for m in MARKER.finditer(text):
        name = m["name"]
        if name not in tmpl:
            raise Fail(f"docs/performance.md: no template '{name}' in tables.tmpl")
        used.append(name)
        start = m.end()
        end = text.find("\n\n", start - 1)
        end = len(text) if end < 0 else end + 1
        old = text[start:end].splitlines()
        new = render(name, tmpl[name], cache)
        first = text.count("\n", 0, start) + 1
        covered.update(range(first, first + len(old)))
        if old != new:
            diffs.extend(difflib.unified_diff(old, new, f"docs/performance.md ({name})",
                                              f"bench/results ({name})", lineterm="", n=0))
        out.append(text[pos:start] + "\n".join(new) + "\n")
        pos = end
    out.append(text[pos:])
    stray = [i for i, line in enumerate(text.splitlines(), 1)
             if line.lstrip().startswith("|") and i not in covered]
    if stray:
        raise Fail(f"docs/performance.md: table lines without a '<!-- table: NAME -->' "
                   f"marker: {stray[:10]}")
    twice = sorted({n for n in used if used.count(n) > 1})
    unused = sorted(set(tmpl) - set(used))
    if twice or unused:
        raise Fail(f"tables.tmpl: templates used twice {twice}, unused {unused}")
    if write:
        new_text = "".join(out)
        if new_text != text:
            with open(DOC, "w") as f:
                f.write(new_text)
            print("docs/performance.md: tables rewritten from bench/results")
        return 0
    if diffs:
        print("\n".join(diffs))
        print("docs/performance.md: tables differ from bench/results "
              "(python3 bench/results/check_tables.py --write rewrites them)")
        return 1
    print(f"docs/performance.md: {len(used)} tables match bench/results")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Fail as e:
        print(f"check_tables: {e}", file=sys.stderr)
        sys.exit(1)
