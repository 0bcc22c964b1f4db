"""A cpu delegate whose lowered function returns one value twice (issue 9).

A `transformers` Llama with a static KV cache killed the compiling process (SIGSEGV) in
`to_backend(CpuPartitioner())`: two outputs of the delegate (cache-position bookkeeping that
both layers compute the same way) became one SSA value once torch-mlir's pipeline CSE'd them,
so the lowered function returned that value twice. After one-shot-bufferize both results are
the same `memref.alloc`, and `buffer-results-to-out-params{hoist-static-allocs=true}` replaces
and erases that alloc once per result: the second time it uses the erased op (MLIR, C++). It
is not a Python-bindings lifetime bug: the same IR crashes when parsed from text.

The smallest reproducer is `(x + 1, x + 1.0)`: two edge ops (Scalar 1 vs 1.0) that lower to
the same linalg op. The compile runs in a child process, so the crash fails this test instead
of killing pytest.

The fix is the cpu pipeline's `etc-cpu-distinct-results`: before `buffer-results-to-out-params`,
every repeated result gets a buffer of its own (`memref.alloc` + `memref.copy`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent('''
    import numpy as np
    import torch

    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner


    class TwiceTheSame(torch.nn.Module):
        def forward(self, x):
            return x + 1, x + 1.0  # two edge ops, one linalg op after CSE


    x = torch.randn(4, 8)
    edge = etc.to_edge(torch.export.export(TwiceTheSame(), (x,))).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and not report.portable, report  # both outputs from the delegate
    program = edge.to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    a, b = (np.asarray(v) for v in method.execute([x]))
    np.testing.assert_allclose(a, (x + 1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(b, (x + 1).numpy(), rtol=1e-6)
    print("OK")
''')


def test_value_returned_twice_by_a_delegate_compiles_and_runs(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert proc.returncode == 0, f"the compiling child died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip().splitlines()[-1] == "OK"
