#!/usr/bin/python3
"""Hotspots of a callgrind profile written by profile_step (bench/profile_core.sh runs it).

  callgrind_summary.py CALLGRIND_OUT STEPS [TOP]

Prints instructions (Ir) per step, the TOP functions by self cost (% of all instructions, with
short names), and the self cost grouped into categories (OpenBLAS, malloc/free, libm, shared_ptr
reference counting, autograd, other Lockstep, other) so it is clear where a step's instructions go.
"""
import re
import subprocess
import sys

LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(.*?):(.*?)(?:\s+\[(.*)\])?\s*$")


def rows(path, inclusive):
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}",
                          "--threshold=100", path], check=True, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    total = None
    res = []
    for line in out.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        m = LINE.match(line)
        if m and total is not None:
            res.append((int(m.group(1).replace(",", "")), m.group(3), m.group(4), m.group(5) or ""))
    return total, res


def strip_params(fn):
    """Drops the trailing parameter list (and const) of a demangled name, keeping inner ones."""
    t = fn.rstrip()
    if t.endswith(" const"):
        t = t[:-6]
    if not t.endswith(")"):
        return fn
    depth = 0
    for i in range(len(t) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(t[i], 0)
        if depth == 0:
            return t[:i] if i > 0 else fn
    return fn


def short(fn, obj):
    fn = strip_params(fn).replace("lockstep::", "").replace("(__gnu_cxx::_Lock_policy)2", "")
    fn = re.sub(r"\(lockstep::Tensor const&[^)]*\)", "(..)", fn)
    fn = re.sub(r"\((Tensor const&|long|bool|, )+\)", "(..)", fn)
    m = re.match(r"autograd::FunctionNode<(\w+)\(.*?\)::\{lambda.*", fn)
    if m:
        fn = f"autograd::FunctionNode<{m.group(1)} backward>::apply"
    m = re.match(r"(\w+)\(\.\.\)::\{lambda\(.*\)#\d\}::operator\(\)", fn)
    if m:
        fn = f"{m.group(1)} backward lambda"
    if len(fn) > 90:
        fn = fn[:87] + "..."
    lib = obj.rsplit("/", 1)[-1] if obj else ""
    return f"{fn} [{lib}]" if lib else fn


def category(file, fn, obj):
    if "openblas" in obj:
        return "OpenBLAS (cblas_sgemm and its kernels/copies)"
    if "_Sp_counted" in fn or "__shared_count" in fn or "enable_shared_from_this" in fn:
        return "shared_ptr control blocks (dispose/destroy, refcounts)"
    if ("malloc" in file or "operator new" in fn or "operator delete" in fn
            or "cpu_allocate" in fn or "cpu_free" in fn or "memalign" in fn
            or re.search(r"lockstep::\S*(Cache|Allocator|allocate)", fn)):
        return "allocation (malloc/free/new/delete, Lockstep allocator)"
    if "libm" in obj or re.search(r"\b__(exp|log)f", fn):
        return "libm (expf/logf)"
    if "memset" in fn or "memcpy" in fn or "memmove" in fn:
        return "memset/memcpy"
    if "pthread" in fn or "futex" in fn:
        return "mutex/threading"
    if "lockstep::autograd" in fn:
        return "Lockstep autograd (graph build/run, nodes)"
    if "lockstep" in fn or "profile_step" in obj:
        return "Lockstep other (ops, tensors, modules, optimizer)"
    return "other (libstdc++, libc, dynamic_cast, ...)"


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    total, self_rows = rows(path, inclusive=False)
    print(f"total {total:,} Ir over {steps} steps = {total / steps:,.0f} Ir per step")
    print()
    print(f"top {top} by self cost:")
    print("| # | function [object] | Ir/step | % |")
    print("|---|---|---|---|")
    for i, (ir, file, fn, obj) in enumerate(sorted(self_rows, reverse=True)[:top], 1):
        print(f"| {i} | {short(fn, obj)} | {ir / steps:,.0f} | {100 * ir / total:.1f} |")
    cats = {}
    for ir, file, fn, obj in self_rows:
        c = category(file, fn, obj)
        cats[c] = cats.get(c, 0) + ir
    print()
    print("self cost by category:")
    print("| category | Ir/step | % |")
    print("|---|---|---|")
    for c, ir in sorted(cats.items(), key=lambda kv: -kv[1]):
        print(f"| {c} | {ir / steps:,.0f} | {100 * ir / total:.1f} |")
    _, inc_rows = rows(path, inclusive=True)
    print()
    print("inclusive cost of the step's parts (Lockstep functions and OpenBLAS drivers, ≥ 2%):")
    print("| function | Ir/step | % |")
    print("|---|---|---|")
    for ir, file, fn, obj in sorted(inc_rows, reverse=True):
        blas_driver = re.match(r"(cblas_sgemm|sgemm_(nn|nt|tn|tt|beta\w*))$", fn)
        if (("lockstep" not in fn and not blas_driver) or 100 * ir / total < 2
                or "Workload::step" in fn):
            continue
        print(f"| {short(fn, obj)} | {ir / steps:,.0f} | {100 * ir / total:.1f} |")


if __name__ == "__main__":
    main()
