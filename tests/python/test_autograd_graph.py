"""The autograd graph from Python: deep graphs are freed and traversed without recursion."""
import subprocess
import sys
import textwrap


def test_dropping_a_million_op_chain_does_not_crash_the_interpreter():
    # Freeing a chain node by node from each node's destructor overflowed the C stack at a few
    # hundred thousand nodes (a segfault: the interpreter died). The child process builds a
    # 1,000,000-op chain, backpropagates through it and drops it; a crash shows as a signal.
    code = textwrap.dedent("""
        import lockstep
        x = lockstep.ones(1, requires_grad=True)
        y = x
        for _ in range(1_000_000):
            y = y * 1.0
        y.sum().backward()
        assert x.grad.item() == 1.0, x.grad
        del y
        print("freed")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
    assert run.stdout.strip() == "freed"
