#!/usr/bin/env python3
"""The docs checkers fail on broken input (ctest docs.checkers_fail; standard library only).

Each case builds a small tree or program in a temporary folder, runs the checker as CI does and
asserts its exit status and the line naming the problem; the same tree fixed must pass, so a
checker that always fails is caught too.
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")


def run(script, *args):
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args],
                         capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout + out.stderr


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


class CheckPaths(unittest.TestCase):
    def check(self, files):
        """check_paths.py's (exit status, output) on a small good tree plus files {rel: text}."""
        with tempfile.TemporaryDirectory() as tmp:
            write(tmp, "src/ops/tree_sum.h", "// Sums (tests/ops/tree_sum_test.cpp checks them).\n")
            write(tmp, "tests/ops/tree_sum_test.cpp", "// src/ops/tree_sum.h:1 against sums\n")
            write(tmp, "docs/design.md", "See `src/ops/tree_sum.h` and `tests/ops/`.\n")
            for rel, text in files.items():
                write(tmp, rel, text)
            return run("check_paths.py", "--root", tmp)

    def test_good_tree_passes(self):
        rc, out = self.check({})
        self.assertEqual(rc, 0, out)

    def test_missing_file_in_a_comment_fails(self):
        rc, out = self.check(
            {"src/ops/sum.cpp": 'int x;  // see src/ops/gone.h\nconst char* s = "src/x.h";\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("src/ops/sum.cpp:1: missing src/ops/gone.h", out)
        self.assertNotIn("src/x.h", out)  # a string literal is not a comment

    def test_missing_file_in_a_doc_fails(self):
        rc, out = self.check(
            {"docs/cuda.md": "line\nThe step is in `src/parallel/data_parallel_step.cpp`.\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("docs/cuda.md:2: missing src/parallel/data_parallel_step.cpp", out)

    def test_broken_markdown_link_fails(self):
        rc, out = self.check({"docs/cli.md": "See [the design](docs/design.md).\n"})
        self.assertEqual(rc, 1, out)  # a link resolves from the page's folder, docs/
        self.assertIn("docs/cli.md:1: missing docs/design.md (a link, relative to docs/)", out)
        rc, out = self.check({"docs/cli.md": "See [the design](design.md#layers).\n"})
        self.assertEqual(rc, 0, out)

    def test_bare_name_and_line_past_the_end_fail(self):
        rc, out = self.check({"src/parallel/data_parallel.cpp":
                              "// The paths are in data_parallel_step.cpp.\n"
                              "// src/ops/tree_sum.h:40\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("src/parallel/data_parallel.cpp:1: missing data_parallel_step.cpp", out)
        self.assertIn("src/ops/tree_sum.h:40 is past the end", out)

    def test_other_projects_paths_are_skipped(self):
        rc, out = self.check({"src/ops/conv.cpp":
                              "// BVLC/caffe:src/caffe/layers/base_conv_layer.cpp and\n"
                              "// https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/x.cpp\n"
                              "// nanoGPT's model.py, <cblas.h>\n"
                              "// placeholders: include/NAME, then src/x\n"})
        self.assertEqual(rc, 0, out)
        rc, out = self.check(
            {"src/ops/conv.cpp": "// BVLC/caffe src/caffe/layers/base_conv_layer.cpp\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("missing src/caffe/layers/base_conv_layer.cpp", out)


FAKE_CLI = '''#!{python}
import sys
HELP = {{
    (): "Lockstep\\nUsage: lockstep [OPTIONS] SUBCOMMAND\\n\\nOPTIONS:\\n"
        "  -h,     --help   Print this help\\n        --version   Version\\n\\n"
        "SUBCOMMANDS:\\n  train   Train\\n  eval    Evaluate\\n",
    ("train",): "Train\\nUsage: lockstep train [OPTIONS]\\n\\nOPTIONS:\\n"
        "  -h,     --help   Print this help\\n        --epochs INT   Epochs\\n"
        "        --zero   ZeRO-1\\n",
    ("eval",): "Evaluate\\nUsage: lockstep eval [OPTIONS]\\n\\nOPTIONS:\\n"
        "  -h,     --help   Print this help\\n        --weights TEXT   Weights\\n",
}}
print(HELP[tuple(a for a in sys.argv[1:] if a != "--help")])
'''

GOOD_DOC = """# CLI
`lockstep --version`, `--help`.
## lockstep train
`--help`, `--epochs N`, `--zero`.
## lockstep eval
`--help`, `--weights FILE`.
"""


class CheckCliDocs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.cli = write(self.tmp.name, "lockstep", FAKE_CLI.format(python=sys.executable))
        os.chmod(self.cli, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def test_every_flag_named_passes(self):
        doc = write(self.tmp.name, "cli.md", GOOD_DOC)
        rc, out = run("check_cli_docs.py", self.cli, "--doc", doc)
        self.assertEqual(rc, 0, out)

    def test_a_missing_flag_fails(self):
        doc = write(self.tmp.name, "cli.md", GOOD_DOC.replace("`--zero`", "ZeRO"))
        rc, out = run("check_cli_docs.py", self.cli, "--doc", doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("lockstep train --zero: not in a section headed 'lockstep train'", out)

    def test_a_flag_named_only_under_another_command_fails(self):
        doc = write(self.tmp.name, "cli.md",
                    GOOD_DOC.replace("`--help`, `--weights FILE`.", "`--help`.")
                    .replace("`--zero`.", "`--zero`, `--weights`."))
        rc, out = run("check_cli_docs.py", self.cli, "--doc", doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("lockstep eval --weights", out)

    def test_a_command_without_a_section_fails(self):
        doc = write(self.tmp.name, "cli.md", GOOD_DOC.split("## lockstep eval")[0])
        rc, out = run("check_cli_docs.py", self.cli, "--doc", doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("lockstep eval: no section headed", out)


class SizeReport(unittest.TestCase):
    def tree(self, tmp, files):
        for k in range(files):
            write(tmp, f"src/w{k}.cpp", f"""\
                #include "w.h"
                namespace lockstep::parallel {{
                void Widget::f{k}(int a) {{
                  if (a) {{ return; }}  // a brace in a comment {{
                }}
                Widget::Widget(int a)
                    : a_{{a}}, b_(a) {{
                  const char* s = "}}";
                }}
                }}  // namespace lockstep::parallel
                """)
        write(tmp, "src/w.h", "struct Widget {\n  int a_, b_;\n};\n")

    def test_two_files_pass_and_three_fail(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.tree(tmp, 2)
            rc, out = run("size_report.py", "--root", tmp, "--check", "src")
            self.assertEqual(rc, 0, out)
            # f: 3 lines, the constructor 4 (its initializer list's a_{a} is not its body).
            self.assertRegex(out, r"\n\s+14\s+2\s+3  Widget: w0.cpp \(7\), w1.cpp \(7\)")
            self.tree(tmp, 3)
            rc, out = run("size_report.py", "--root", tmp, "--check", "src")
            self.assertEqual(rc, 1, out)
            self.assertIn("3 files  Widget:", out)
            rc, out = run("size_report.py", "--root", tmp, "--check", "--allow", "Widget", "src")
            self.assertEqual(rc, 0, out)
            self.assertIn("Widget (allowed)", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
