#!/usr/bin/env python3
"""Product files describe libtodre, not how it was made.

Every file git tracks (text files only) is read for the vocabulary of the
development process: labels of work sittings ("session 12", "sessions 9-15"),
internal issue numbers ("issue #12", a bare "(#12)"), numbered references to
a list of findings ("finding 6"), the machines and tools of the work rather
than of the product ("the device machine", "work log", "lab notebook",
"subagent"), and dates or clock times of work in prose ("2026-11-27",
"11:53 UTC"). A reader of the docs, the sources or the tests needs the
product: what it does, and for a figure the command that reproduces it and
the machine it ran on; the history belongs in CHANGELOG.md, in product terms.
A legitimate use (an upstream project's issue number, a date that a file
format requires, a third-party licence text) goes in scripts/check_words.allow,
one `path` or `path:regex` per line, with a comment saying why.

    python3 scripts/check_words.py [--allow FILE] [PATH...]

With no PATH every tracked file is checked; with PATHs, only those tracked
files (or tracked files under those directories). Prints `path:line: matched
text` for each hit and exits 1 if there is any, 0 otherwise (2 on a usage
error or an unreadable allow-list).
"""

import argparse
import fnmatch
import os
import re
import subprocess
import sys

# Each pattern is searched case-insensitively; (?<![\w-]) / (?![\w-]) keep
# it to whole words. Every pattern needs one of KEYWORDS (or a date) in the
# line: the lines without any are skipped unsearched, which keeps the check
# of the whole tree well under a second.
PATTERNS = [
    # work-sitting labels: "session 12", "sessions 9-15", "session-12"; and
    # "session" in prose at all ("this session", "the session's start"),
    # except as a quoted or dotted identifier (pytest's scope="session", a
    # file "session.json") or part of one (session_run)
    r"(?<![\w-])sessions?[ -]\d+(?:-\d+)?(?![\w-])",
    r"(?<![\w\"'./-])sessions?(?![\w\"-]|\.\w)",
    # sittings of work (the noun: "this sitting", "sittings", "sitting 4"; not
    # "rows sitting in L2")
    r"(?<![\w-])(?:this|that|the|a|each|every|one|next|previous|earlier|later|same|last|"
    r"first|its|our|work) sitting(?![\w-])",
    r"(?<![\w-])sittings(?![\w-])|(?<![\w-])sittings?[ -]\d+(?![\w-])",
    # internal issue numbers: "issue #12", "issue-#15", "Issue 15", "of issue
    # 15", "(issue 15's target"; a bare "(#12)"; not the verb ("it issues
    # 16-byte loads"); an upstream project's "vLLM #27859" is not matched
    r"(?<![\w-])issues?[ -]#\d+",
    r"(?-i:(?<![\w-])Issues?) \d+(?![\w-])",
    r"(?:(?<=\()|(?<![\w-])(?:of|in|by|see) )issues? \d+(?![\w-])",
    r"\(#\d+\)",
    r"(?<![\w-])(?:pull request|PR|ticket)s? #\d+",
    # "the issue" as the statement of a task ("where the issue was silent",
    # "the four the issue lists"); not an instruction's issue rate or port
    r"(?<![\w-])(?:the|this|that|our) issue(?![\w-])(?! (?:rate|width|port|slot|queue)s?\b)",
    # numbered references to a list of findings: "finding 6", "Findings" 1-4
    r"(?<![\w-])findings?\"? \d+",
    # the machines, tools and roles of the work, not of the product
    r"(?<![\w-])device machines?(?![\w-])",
    r"(?<![\w-])work[ -]?logs?(?![\w-])",
    r"(?<![\w-])lab notebooks?(?![\w-])",
    r"(?<![\w-])sub-?agents?(?![\w-])",
    r"(?<![\w-])(?:helper|assistant) (?:session|agent)s?(?![\w-])",
    r"(?<![\w-])(?:other|another|fellow) engineers?(?:'s|')?(?![\w-])",
    r"(?<![\w-])teammates?(?![\w-])",
    r"(?<![\w-])the brief(?![\w-])",
    # dates and clock times of work: "2026-11-27", "11:53-12:58 UTC"
    r"(?<![\w-])20\d\d-[01]\d-[0-3]\d(?![\w-])",
    r"(?<![\w:])\d\d?:\d\d(?:-\d\d?:\d\d)? UTC(?![\w-])",
]
WORDS = re.compile("|".join("(?:%s)" % p for p in PATTERNS), re.IGNORECASE)
KEYWORDS = ("session", "sitting", "issue", "#", "finding", "device machine", "work log",
            "work-log", "worklog", "notebook", "agent", "engineer", "teammate", "brief", "utc")
DATE = re.compile(r"\d-[01]\d-[0-3]\d")


def candidate(text):
    """Whether @text may hold a hit: a keyword or a date in it."""
    low = text.lower()
    return any(k in low for k in KEYWORDS) or DATE.search(text) is not None


HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ALLOW = os.path.join(HERE, "check_words.allow")


def load_allow(path):
    """[(path glob, compiled regex or None)] from the allow-list file."""
    rules = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            glob, sep, rx = line.partition(":")
            try:
                rules.append((glob.strip(), re.compile(rx, re.IGNORECASE) if sep else None))
            except re.error as exc:
                raise SystemExit(f"{path}:{n}: bad regex {rx!r}: {exc}") from None
    return rules


def tracked_files(root, paths):
    cmd = ["git", "-C", root, "ls-files", "-z", "--"] + list(paths)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE).stdout
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def read_text(path):
    """The file's text, or None for a binary file, a link or a missing one."""
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description="Product files describe libtodre, "
                                 "not how it was made: find process vocabulary.")
    ap.add_argument("--allow", default=DEFAULT_ALLOW, help="allow-list file "
                    "(default: scripts/check_words.allow)")
    ap.add_argument("paths", nargs="*", help="limit the check to these tracked paths")
    args = ap.parse_args(argv)

    root = subprocess.run(["git", "-C", HERE, "rev-parse", "--show-toplevel"], check=True,
                          stdout=subprocess.PIPE).stdout.decode().strip()
    try:
        rules = load_allow(args.allow)
    except OSError as exc:
        print(f"check_words: cannot read the allow-list: {exc}", file=sys.stderr)
        return 2
    paths = [os.path.relpath(os.path.abspath(p), root) for p in args.paths]

    hits = []
    for rel in tracked_files(root, paths):
        file_rules = [rx for glob, rx in rules if fnmatch.fnmatchcase(rel, glob)]
        if None in file_rules:  # the whole file is allowed
            continue
        text = read_text(os.path.join(root, rel))
        if text is None or not candidate(text):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not candidate(line):
                continue
            for m in WORDS.finditer(line):
                if not any(rx.search(line) for rx in file_rules):
                    hits.append(f"{rel}:{n}: {m.group(0)}")
    for h in hits:
        print(h)
    if hits:
        print(f"check_words: {len(hits)} passage(s) speak of how libtodre was made, not of "
              "libtodre (rewrite them, or allow a legitimate use in "
              "scripts/check_words.allow)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
