#!/usr/bin/env python3
"""Sizes of the code: lines per file and per class, and the rule that no class has member
definitions in more than 2 .cpp files.

Usage:
    scripts/size_report.py                      # both tables, the largest first (20 rows each)
    scripts/size_report.py --rows 0             # every file and class
    scripts/size_report.py --check              # exit 1 when a class has member definitions in
                                                # more than --max-cpp-files (2) .cpp/.cu files
    scripts/size_report.py --check --allow Trainer,DataParallel   # known offenders, reported
                                                # but not failing
    scripts/size_report.py --root DIR src app   # another tree / other folders

Per file: lines, for every C++/CUDA file under the folders (default src include app python/src),
with those over 300 lines (the codebase's 80-300 rule) counted.

Per class: the lines of its member definitions, summed over files: every out-of-class definition
`R Class::member(...) { ... }` (constructors, destructors and operators too; a nested class
counts as `Outer::Inner`), plus the whole body of a class defined in a .cpp/.cu file; and the
.cpp/.cu files holding them (`cpp files`). A class body in a header is reported beside it as
`header lines` (declarations and inline definitions), not added to `lines`. Classes are told
from namespaces by their spelling (CamelCase classes, lower_case namespaces, as everywhere in
this codebase). Python's standard library only; no build needed. The parser reads comments,
strings and brace nesting, not C++: a macro that opens a brace can confuse it (none does today).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict

DEFAULT_DIRS = ("src", "include", "app", "python/src")
SOURCE_EXTS = (".cpp", ".cc", ".cu")
HEADER_EXTS = (".h", ".hpp", ".cuh")
FILE_LIMIT = 300

MEMBER = re.compile(
    r"((?:[A-Za-z_]\w*(?:<[^<>;{}]*(?:<[^<>;{}]*>[^<>;{}]*)*>)?\s*::\s*)+)"
    r"(~?[A-Za-z_]\w*|operator\s*(?:\(\)|[^\s(]+))\s*\(")
CLASS_HEAD = re.compile(r"^(?:template\s*<.*>\s*)?(?:class|struct|union)\s+"
                        r"(?:\[\[[^\]]*\]\]\s*|alignas\([^)]*\)\s*)*([A-Za-z_]\w*)\b[^=(]*$", re.S)


def strip_code(text: str) -> str:
    """text with comments, string and character literals and preprocessor lines blanked
    (newlines kept, so offsets map to the same lines)."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            j = i
            while True:  # a directive with its backslash continuations
                k = text.find("\n", j)
                if k < 0:
                    k = n
                if k > 0 and text[k - 1] == "\\" and k < n:
                    j = k + 1
                    continue
                break
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
            continue
        if c == "\n":
            at_line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            k = text.find("\n", i)
            k = n if k < 0 else k
            out.append(" " * (k - i))
            i = k
        elif text.startswith("/*", i):
            k = text.find("*/", i + 2)
            k = n if k < 0 else k + 2
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or
                                                           text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            k = text.find(")" + m.group(1) + '"', i)
            k = n if k < 0 else k + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:k]))
            i = k
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and text[i + 1:i + 2].isalnum() \
                    and text[i + 2:i + 3] != "'":
                out.append(c)  # a digit separator, 1'000'000
                i += 1
                continue
            k = i + 1
            while k < n and text[k] != c and text[k] != "\n":
                k += 2 if text[k] == "\\" else 1
            k = min(k + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:k - 1]) + c)
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(code: str, i: int) -> int:
    """Index of the '}' closing the '{' at i (or len(code))."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def class_of(qualifiers: str):
    """`lockstep::parallel::DataParallel::` -> `DataParallel`; namespaces only -> None."""
    parts = [re.sub(r"<.*", "", p).strip() for p in qualifiers.split("::") if p.strip()]
    for k, p in enumerate(parts):
        if p[:1].isupper():
            return "::".join(parts[k:])
    return None


def line_span(code: str, start: int, end: int):
    # From the first non-blank character of the declaration to its closing brace.
    while start < end and code[start].isspace():
        start += 1
    first = code.count("\n", 0, start) + 1
    last = code.count("\n", 0, end) + 1
    return first, last


def class_sizes(root: str, files):
    """{class: {"lines": n, "header_lines": n, "cpp": {file: lines}, "headers": {file: lines}}}"""
    table = defaultdict(lambda: {"lines": 0, "header_lines": 0, "cpp": defaultdict(int),
                                 "headers": defaultdict(int)})
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            code = strip_code(f.read())
        is_source = rel.endswith(SOURCE_EXTS)
        # Namespace bodies are scanned with their own offsets: remember where each begins.
        def walk(text, base):
            def on_member(name, s, e):
                a, b = line_span(code, base + s, base + e)
                entry = table[name]
                entry["lines"] += b - a + 1
                (entry["cpp"] if is_source else entry["headers"])[rel] += b - a + 1

            def on_class(name, s, e):
                a, b = line_span(code, base + s, base + e)
                entry = table[name]
                if is_source:
                    entry["lines"] += b - a + 1
                    entry["cpp"][rel] += b - a + 1
                else:
                    entry["header_lines"] += b - a + 1
                    entry["headers"][rel] += b - a + 1

            i, n, start = 0, len(text), 0
            while i < n:
                c = text[i]
                if c in ";}":
                    start = i + 1
                    i += 1
                    continue
                if c != "{":
                    i += 1
                    continue
                head = text[start:i].strip()
                end = matching_brace(text, i)
                if re.match(r"^(?:inline\s+)?namespace\b|^extern\s*\"", head):
                    walk(text[i + 1:end], base + i + 1)
                else:
                    cls = CLASS_HEAD.match(head)
                    member = None if cls else MEMBER.search(head)
                    if cls:
                        on_class(cls.group(1), start, end)
                    elif member:
                        # A constructor's initializer list may hold braces (x_{0}, y_{}): a '{'
                        # right after a name or '>' belongs to the list, not the body.
                        while re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?:", head[member.end():]) \
                                and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>"):
                            nxt = text.find("{", end + 1)
                            if nxt < 0:
                                break
                            i, end = nxt, matching_brace(text, nxt)
                            head = text[start:i].strip()
                        name = class_of(member.group(1))
                        if name:
                            on_member(name, start, end)
                i = end + 1
                start = i

        walk(code, 0)
    return table


def list_files(root: str, dirs):
    out = []
    for d in dirs:
        top = os.path.join(root, d)
        if not os.path.isdir(top):
            print(f"size_report: {d}: no such folder under {root}", file=sys.stderr)
            sys.exit(2)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXTS + HEADER_EXTS):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--rows", type=int, default=20, help="rows per table (0: all)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a class not in --allow has member definitions in more "
                         "than --max-cpp-files .cpp/.cu files")
    ap.add_argument("--max-cpp-files", type=int, default=2)
    ap.add_argument("--allow", default="", help="comma-separated classes --check reports but "
                    "does not fail on (known offenders being split)")
    ap.add_argument("dirs", nargs="*", default=list(DEFAULT_DIRS))
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    files = list_files(root, args.dirs)
    rows = args.rows if args.rows > 0 else None

    sizes = []
    for rel in files:
        with open(os.path.join(root, rel), "rb") as f:
            sizes.append((f.read().count(b"\n"), rel))
    sizes.sort(key=lambda t: (-t[0], t[1]))
    over = [s for s in sizes if s[0] > FILE_LIMIT]
    print(f"== lines per file: {len(files)} files in {' '.join(args.dirs)}, "
          f"{sum(s[0] for s in sizes)} lines, {len(over)} over {FILE_LIMIT}")
    for n, rel in sizes[:rows]:
        print(f"{n:6d}  {rel}")

    table = class_sizes(root, files)
    classes = sorted(table.items(), key=lambda kv: (-kv[1]["lines"], kv[0]))
    print(f"\n== lines per class (member definitions, summed over files): {len(classes)} classes")
    print(f"{'lines':>6} {'cpp files':>9} {'header lines':>12}  class: files (lines)")
    for name, e in classes[:rows]:
        where = ", ".join(f"{os.path.basename(f)} ({k})"
                          for f, k in sorted(e["cpp"].items(), key=lambda t: -t[1]))
        print(f"{e['lines']:6d} {len(e['cpp']):9d} {e['header_lines']:12d}  {name}: {where}")

    allowed = {a.strip() for a in args.allow.split(",") if a.strip()}
    offenders = [(name, e) for name, e in classes if len(e["cpp"]) > args.max_cpp_files]
    print(f"\n== classes with member definitions in more than {args.max_cpp_files} .cpp files: "
          f"{len(offenders)}")
    failing = []
    for name, e in sorted(offenders, key=lambda kv: (-len(kv[1]["cpp"]), kv[0])):
        mark = " (allowed)" if name in allowed else ""
        print(f"{len(e['cpp']):3d} files  {name}{mark}: " + ", ".join(sorted(e["cpp"])))
        if name not in allowed:
            failing.append(name)
    stale = sorted(allowed - {name for name, _ in offenders})
    if stale:
        print(f"(--allow names classes that are no longer offenders: {', '.join(stale)}; "
              f"drop them)")
    if args.check and failing:
        print(f"size_report: {len(failing)} class(es) with member definitions in more than "
              f"{args.max_cpp_files} .cpp files: {', '.join(failing)} (split the class by concept, "
              f"or keep its definitions in at most {args.max_cpp_files} files)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
