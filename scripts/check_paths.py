#!/usr/bin/env python3
"""Every repository path named in a comment or a doc must exist.

Usage:
    scripts/check_paths.py            # the whole repository; exit 1 listing each missing path
    scripts/check_paths.py --root DIR # another tree (the ctest docs.check_paths_fails runs it on
                                      # a fixture that must fail)
    scripts/check_paths.py FILE...    # only these files (paths relative to the root)

What is checked (Python's standard library only, no build needed):
  - where: the comments of source files (C++/CUDA `//` and `/* */`, `#` in Python, shell, CMake,
    Python docstrings) under src/ include/ app/ python/ tests/ bench/ examples/ scripts/ cmake/
    fuzz/ .ci/ and CMakeLists.txt, and the whole text of every *.md file;
  - what: a path that starts with one of those top-level folders or docs/ (`src/ops/tree_sum.h`,
    `tests/e2e/`, `docs/cuda.md:44`) must name a file or folder of this repository; with `:LINE`
    (or `:FIRST-LAST`) the file must have that many lines. A bare file name (`trainer.h`,
    `replicas.h`) must exist next to the file that names it or anywhere in the tree.
    Under python/, `src/...` is also looked up from python/. A Markdown link, `[text](../x.h)`,
    must reach a file from the page's own folder.
  - not checked: another project's path written with its repository, `owner/repo:path`
    (`pytorch/pytorch:torch/nn/parallel/data_parallel.py`, `karpathy/nanoGPT:model.py`), or as a
    URL; paths with wildcards or placeholders (`tests/data/*.json`, `include/NAME`,
    `include/x`); names of files a build or command writes (WRITTEN below); this script's own
    examples.

Output: one line per missing path, `FILE:LINE: missing PATH` (or `...: PATH has N lines`), then
a count; exit status 0 when nothing is missing, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import tokenize

ROOTS = ("src", "include", "app", "python", "tests", "bench", "examples", "scripts", "cmake",
         "fuzz", ".ci", "docs")
SOURCE_DIRS = tuple(r for r in ROOTS if r != "docs")
C_LIKE = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
HASH_COMMENTS = (".sh", ".cmake", ".txt", ".toml", ".supp")
SKIP_DIRS = {".git", ".venv", ".cache", "__pycache__", "node_modules", "gpu-deps"}
FILE_EXTS = ("cpp", "h", "hpp", "cu", "cuh", "py", "sh", "cmake", "md", "json", "csv", "supp",
             "safetensors", "txt", "toml", "jsonl", "gz", "idx")
# Bare names of files that a build or a command writes (never in the tree).
WRITTEN = {"lockstepConfig.cmake", "lockstepTargets.cmake", "lockstep_layers.cmake",
           "bench-compare.md", "pin.sh", "optim_traj.py"}
# Bare names of other projects' files, with their repository. A path of another project is
# written owner/repo:path (or as a URL); a bare name of theirs that docs use often is listed here.
EXTERNAL = {
    "model.py": "karpathy/nanoGPT", "train.py": "karpathy/nanoGPT",
    "sample.py": "karpathy/nanoGPT", "prepare.py": "karpathy/nanoGPT",
    "replicate.py": "pytorch/pytorch", "scatter_gather.py": "pytorch/pytorch",
    "DistributionsHelper.h": "pytorch/pytorch", "TransformationHelper.h": "pytorch/pytorch",
    "DistributionKernels.cpp": "pytorch/pytorch", "AvgPoolKernel.cpp": "pytorch/pytorch",
    "DilatedMaxPool2d.cu": "pytorch/pytorch", "ConvolutionMM2d.cpp": "pytorch/pytorch",
    "avx_mathfun.h": "pytorch/pytorch",
    "transformer.h": "karpathy/nanoGPT",  # the module attribute self.transformer.h, not a file
}

# A rooted path: a top-level folder, then path characters; not preceded by a path character, a
# ':' (owner/repo:path) or a '/' (a URL or another project's deeper path).
ROOTED = re.compile(
    r"(?<![\w/.:@$~-])((?:%s)/[\w./+-]*)(?::(\d+)(?:-(\d+))?)?" %
    "|".join(re.escape(r) for r in ROOTS))
# A bare file name with an extension of ours, not part of a path or of owner/repo:name.
BARE = re.compile(
    r"(?<![\w/.:@$~*<{-])([A-Za-z_][\w-]*\.(?:cpp|h|hpp|cu|cuh|py|sh|cmake|md))\b(?![/\w(-]|\.\w)"
    r"(?::(\d+)(?:-(\d+))?)?")
# A Markdown link to a file of this repository, relative to the page: [text](../src/x.h#L3).
MD_LINK = re.compile(r"\]\(([^()\s#]+)(?:#[^()\s]*)?\)")
PLACEHOLDER = re.compile(r"[*{}<>]|\.\.\.|…|XXXX")
# A placeholder, not a path: include/NAME, DIR, or one letter (include/x).
UPPER_NAME = re.compile(r"/(?:[A-Z][A-Z_]*|[a-z])$")


def source_files(root: str):
    """Every file under root to scan, as a path relative to root, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIP_DIRS and not (rel_dir == "." and (d.startswith("build") or
                                                               d.startswith("."))
                                           and d != ".ci"))
        for f in sorted(filenames):
            rel = os.path.normpath(os.path.join(rel_dir, f))
            top = rel.split(os.sep)[0]
            if f.endswith(".md") or (top in SOURCE_DIRS and kind_of(rel)) or \
                    rel == "CMakeLists.txt":
                out.append(rel)
    return out


def kind_of(rel: str):
    if rel.endswith(C_LIKE):
        return "c"
    if rel.endswith(".py"):
        return "py"
    if rel.endswith(".md"):
        return "md"
    if rel.endswith(HASH_COMMENTS) or rel == os.path.join(".ci", "run") or \
            os.path.basename(rel) == "CMakeLists.txt":
        return "hash"
    return None


def c_comments(text: str):
    """(line, text) of every // and /* */ comment, skipping string and character literals."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            for k, part in enumerate(text[i + 2:j].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, j)
            i = j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end
            line += text.count("\n", i, end)
            i = end + len(m.group(1)) + 2
        elif c in "\"'":
            # A character literal or digit separator (1'000) is short; a string ends at its quote.
            if c == "'" and i > 0 and text[i - 1].isalnum() and text[i + 1:i + 2].isalnum() \
                    and text[i + 2:i + 3] != "'":
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def py_comments(text: str):
    """(line, text) of Python comments and docstrings (string statements)."""
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return hash_comments(text)
    prev = tokenize.NEWLINE
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string[1:]))
        elif tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.NL,
                                                     tokenize.INDENT, tokenize.DEDENT):
            for k, part in enumerate(tok.string.split("\n")):
                out.append((tok.start[0] + k, part))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
    return out


def hash_comments(text: str):
    """(line, text) after a '#' that starts a comment in shell, CMake and similar files."""
    out = []
    for k, raw in enumerate(text.split("\n"), 1):
        quote = None
        for j, c in enumerate(raw):
            if quote:
                if c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "#" and (j == 0 or raw[j - 1] in " \t;(") and raw[j - 1:j] != "$":
                if not raw.startswith("#!"):
                    out.append((k, raw[j + 1:]))
                break
    return out


def md_lines(text: str):
    return list(enumerate(text.split("\n"), 1))


class Tree:
    def __init__(self, root: str):
        self.root = root
        self.basenames = set()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and
                           not (dirpath == root and d.startswith("build"))]
            self.basenames.update(filenames)
        self.line_counts = {}

    def lines_of(self, path: str) -> int:
        if path not in self.line_counts:
            with open(path, "rb") as f:
                self.line_counts[path] = f.read().count(b"\n")
        return self.line_counts[path]

    def resolve(self, path: str, bases):
        for base in bases:
            full = os.path.normpath(os.path.join(self.root, base, path))
            if os.path.exists(full):
                return full
        return None


def problems_in(tree: Tree, rel: str):
    kind = kind_of(rel)
    with open(os.path.join(tree.root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    chunks = {"c": c_comments, "py": py_comments, "hash": hash_comments, "md": md_lines}[kind](text)
    here = os.path.dirname(rel)
    # Where a rooted path may be found: the root, and under python/ the package's own root.
    bases = [""] + (["python"] if rel.startswith("python" + os.sep) else [])
    found = []
    for line, chunk in chunks:
        for m in ROOTED.finditer(chunk):
            path = m.group(1).rstrip(".,;")
            if PLACEHOLDER.search(chunk[m.start():m.end() + 3]) or path.endswith("/."):
                continue
            if UPPER_NAME.search(path):
                continue
            full = tree.resolve(path, bases)
            if full is None and "." not in path.split("/")[-1]:
                # A program built from a source of that name (bench/bench_ddp, app/metrics).
                full = next((f for f in (tree.resolve(path + ext, bases)
                                         for ext in (".cpp", ".h", ".py", ".sh")) if f), None)
            found.append((line, path, full, m.group(2), m.group(3)))
        for m in BARE.finditer(chunk):
            name = m.group(1)
            if name in WRITTEN or name in EXTERNAL or UPPER_NAME.search("/" + name.split(".")[0]) \
                    or PLACEHOLDER.search(chunk[max(0, m.start() - 1):m.end() + 3]):
                continue
            full = tree.resolve(name, [here])
            if full is None and name in tree.basenames:
                continue  # exists elsewhere in the tree: not ambiguous enough to flag
            found.append((line, name, full, m.group(2), m.group(3)))
    if kind == "md":
        for line, chunk in chunks:
            for m in MD_LINK.finditer(chunk):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto:
                full = tree.resolve(target, [here])
                found.append((line, f"{target} (a link, relative to {here or 'the root'}/)", full,
                              None, None))
    out = []
    for line, path, full, first, last in found:
        if full is None:
            out.append(f"{rel}:{line}: missing {path}")
        elif first and os.path.isfile(full):
            want = int(last or first)
            have = tree.lines_of(full)
            if want > have:
                out.append(f"{rel}:{line}: {path}:{last and first + '-' + last or first} "
                           f"is past the end ({path} has {have} lines)")
    return out


def main(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="See the top of this file for what is checked and how to name another "
               "project's file (owner/repo:path).")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the repository to check (default: this script's repository)")
    ap.add_argument("files", nargs="*", help="files to check, relative to the root "
                    "(default: every comment and *.md file)")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    if not os.path.isdir(root):
        print(f"check_paths: --root {args.root}: not a directory", file=sys.stderr)
        return 2
    tree = Tree(root)
    # This script's own examples of paths are not checked (they illustrate the format).
    files = args.files or [f for f in source_files(root)
                           if f != os.path.join("scripts", "check_paths.py")]
    problems = []
    for rel in files:
        if not os.path.isfile(os.path.join(root, rel)):
            print(f"check_paths: {rel}: no such file under {root}", file=sys.stderr)
            return 2
        if kind_of(rel):
            problems += problems_in(tree, rel)
    for p in problems:
        print(p)
    if problems:
        print(f"check_paths: {len(problems)} path(s) named in comments or docs do not exist "
              f"({len(files)} files read). Fix the path, or write another project's file as "
              f"owner/repo:path or a URL.")
        return 1
    print(f"check_paths: every repository path named in the comments and docs of {len(files)} "
          f"files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
