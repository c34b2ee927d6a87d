#!/usr/bin/env python3
"""docs/cli.md names every flag that `lockstep <command> --help` prints, for every command.

Usage:
    scripts/check_cli_docs.py build/lockstep                 # checks docs/cli.md
    scripts/check_cli_docs.py build/lockstep --doc FILE.md   # another reference page

The commands are the ones `lockstep --help` lists (train, eval, generate, ...); each command's
flags are read from `lockstep COMMAND --help` (CLI11's OPTIONS section). The reference must name
each flag in a section (a `##` heading and what follows, up to the next `##`) whose heading names
`lockstep COMMAND`, as `--flag`; the top-level flags (`--version`, ...) anywhere in the page.
Output: one line per flag missing, `docs/cli.md: lockstep train --flag: not in a section headed
'lockstep train'`, then a count; exit 0 when every flag is named, 1 otherwise, 2 when the
program cannot be run. Python's standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

FLAG_LINE = re.compile(r"^\s+(?:-\w\s*,\s*)?(--[A-Za-z0-9][\w-]*)")
FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)")


def run_help(program, args):
    try:
        out = subprocess.run([program, *args, "--help"], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "COLUMNS": "200"})
    except OSError as e:
        print(f"check_cli_docs: cannot run {program}: {e}", file=sys.stderr)
        sys.exit(2)
    if out.returncode != 0:
        print(f"check_cli_docs: `{program} {' '.join(args)} --help` exited {out.returncode}:\n"
              f"{out.stderr}", file=sys.stderr)
        sys.exit(2)
    return out.stdout


def sections(text):
    """[(heading, body)] split at `## ` headings; the text before the first is heading ''."""
    out, heading, body = [], "", []
    for line in text.split("\n"):
        if line.startswith("## "):
            out.append((heading, "\n".join(body)))
            heading, body = line[3:], []
        else:
            body.append(line)
    out.append((heading, "\n".join(body)))
    return out


def parse_help(text):
    """(flags, subcommands) of one --help page: the OPTIONS and SUBCOMMANDS sections."""
    flags, commands, part = [], [], None
    for line in text.split("\n"):
        head = line.strip().rstrip(":").upper()
        if line and not line[0].isspace():
            part = head if head in ("OPTIONS", "SUBCOMMANDS", "FLAGS") else None
            continue
        if part in ("OPTIONS", "FLAGS"):
            m = FLAG_LINE.match(line)
            if m:
                flags.append(m.group(1))
        elif part == "SUBCOMMANDS":
            m = re.match(r"^\s+([a-z][\w-]*)(\s|$)", line)
            if m:
                commands.append(m.group(1))
    return flags, commands


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("program", help="the lockstep executable (build/lockstep)")
    ap.add_argument("--doc", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "cli.md"))
    args = ap.parse_args(argv)
    with open(args.doc, encoding="utf-8") as f:
        doc = f.read()
    doc_name = os.path.relpath(args.doc)
    top_flags, commands = parse_help(run_help(args.program, []))
    if not commands:
        print(f"check_cli_docs: `{args.program} --help` lists no SUBCOMMANDS section",
              file=sys.stderr)
        return 2
    missing, counted = [], 0
    named_anywhere = set(FLAG.findall(doc))
    for flag in top_flags:
        counted += 1
        if flag not in named_anywhere:
            missing.append(f"{doc_name}: lockstep {flag}: not named anywhere")
    parts = sections(doc)
    for command in commands:
        flags, _ = parse_help(run_help(args.program, [command]))
        if not flags:  # a help format this parser does not read must not pass as "all named"
            print(f"check_cli_docs: `{args.program} {command} --help` lists no flags in an "
                  f"Options section", file=sys.stderr)
            return 2
        heading = re.compile(r"\blockstep\s+%s\b" % re.escape(command))
        named = set()
        headed = [body for head, body in parts if heading.search(head)]
        for body in headed:
            named.update(FLAG.findall(body))
        if not headed:
            missing.append(f"{doc_name}: lockstep {command}: no section headed "
                           f"'## ... lockstep {command} ...'")
        for flag in flags:
            counted += 1
            if headed and flag not in named:
                missing.append(f"{doc_name}: lockstep {command} {flag}: not in a section headed "
                               f"'lockstep {command}'")
    for m in missing:
        print(m)
    if missing:
        print(f"check_cli_docs: {len(missing)} of {counted} flags of {len(commands)} commands "
              f"({', '.join(commands)}) are not documented in {doc_name}")
        return 1
    print(f"check_cli_docs: {doc_name} names all {counted} flags of lockstep and its "
          f"{len(commands)} commands ({', '.join(commands)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
