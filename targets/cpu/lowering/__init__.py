"""The front of the cpu back end: an outlined edge function -> linalg on tensors.

The libraries behind the first passes of `pipeline.cpu_pipeline`:

    context.py          the torch-aware MLIR context; a delegate function re-imported into it
    torch_ops.py        edge op -> the torch op of the same ATen name (data: schema arguments,
                        ADAPTERS), and back (`decode`)              -> etc-cpu-edge-to-torch
    quantized*.py       the folded int8 ops -> linalg on i8 / i32     -> etc-cpu-lower-quantized
    expansions.py,      torch ops torch-mlir does not lower to what our codegen takes -> ops it
    reshape.py          does (views as reshapes, scans, scatters)     -> etc-cpu-expand-torch-ops
    support.py          what the partitioner may delegate: a structural check, then a trial
                        lowering through the same pipeline for the same target

then torch-mlir's own pipelines take the torch dialect to linalg.
"""
