"""`make demo`: one model through the whole pipeline, with what each stage produced.

    export -> aten dialect -> edge dialect -> memory plan -> .pte -> etc runtime
                                          \\-> cpu delegate (MLIR -> LLVM -> object code)

It prints the IR at each dialect, the planned memory next to its lower bound,
and the outputs of the etc runtime next to eager PyTorch's.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import torch

# The demo model is the keyword-spotting DS-CNN of the model zoo (etc.models.zoo, an MLPerf Tiny
# workload): conv, depthwise conv, batch norm, relu, pooling, linear.


def _banner(title: str) -> None:
    print(f"\n{'=' * 78}\n{title}\n{'=' * 78}")


def _head(text: str, lines: int = 14) -> str:
    """The first `lines` lines of the method, after a count of the weights (globals)."""
    rows = text.splitlines()
    globals_ = [r for r in rows if "ml_program.global private" in r]
    body = [r for r in rows if "ml_program.global private" not in r and r.strip() not in ("module {", "}")]
    more = f"\n    ... ({len(body) - lines} more lines)" if len(body) > lines else ""
    return f"// {len(globals_)} weights as ml_program.global (their bytes stay outside the IR)\n" + \
        "\n".join(body[:lines]) + more


def _median_ms(fn, runs: int = 20) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    import etc
    from etc.runtime import Runtime
    from etc.models.zoo import ZOO

    torch.manual_seed(0)
    zoo_model = ZOO["kws_dscnn"]()
    model, inputs = zoo_model.module, zoo_model.example_inputs
    exported = torch.export.export(model, inputs)

    _banner("1. torch.export -> aten dialect (one op per ATen overload, user source locations)")
    print(_head(str(etc.import_program(exported)), 12))

    _banner("2. to_edge: Core ATen decomposition, aten -> edge, constant folding, batch norm fused")
    edge = etc.to_edge(exported)
    print(_head(edge.program_ir.to_text(debug_info=False), 16))

    _banner("3. to_executorch: memory planning and emission of a .pte program")
    program = edge.to_executorch()
    path = os.path.join(tempfile.gettempdir(), "etc_demo_kws_dscnn.pte")
    program.save(path)
    print(program.memory_report())
    print(f"\nwrote {path}: {len(program.buffer):,} bytes")

    _banner("4. the etc runtime runs it; outputs next to eager PyTorch")
    method = Runtime.get().load_program(path).load_method("forward")
    (ours,) = method.execute(list(inputs))
    reference = model(*inputs).detach()
    print(f"etc     : {np.array2string(np.asarray(ours)[0], precision=4)}")
    print(f"PyTorch : {np.array2string(reference.numpy()[0], precision=4)}")
    error = float(np.abs(np.asarray(ours) - reference.numpy()).max() / max(1.0, float(reference.abs().max())))
    print(f"max error relative to output scale: {error:.2e}")

    _banner("5. the cpu target: the whole model as one native call")
    from etc.targets.cpu import CpuPartitioner

    cpu_edge = etc.to_edge(exported).to_backend(CpuPartitioner())
    print(cpu_edge.delegation_info())
    cpu_method = Runtime.get().load_program(cpu_edge.to_executorch().buffer).load_method("forward")
    (native,) = cpu_method.execute(list(inputs))
    error = float(np.abs(np.asarray(native) - reference.numpy()).max() / max(1.0, float(reference.abs().max())))
    print(f"max error relative to output scale: {error:.2e}")
    torch.set_num_threads(1)
    portable_ms = _median_ms(lambda: method.execute(list(inputs)))
    native_ms = _median_ms(lambda: cpu_method.execute(list(inputs)))
    eager_ms = _median_ms(lambda: model(*inputs))
    print(f"median latency: etc portable {portable_ms:.3f} ms, etc cpu {native_ms:.3f} ms, "
          f"torch eager (1 thread) {eager_ms:.3f} ms")


if __name__ == "__main__":
    with torch.no_grad():
        main()
