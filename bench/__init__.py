"""The benchmarks: etc against torch eager and ExecuTorch (+ XNNPACK), every figure a median or a ratio
measured in the same run.

`python -m etc.bench` (`make bench`) runs every section and writes BENCHMARKS.md (`report`); each
section is also a module with its own command line: `zoo` models in `report`, `int8`, `library`
(models as C libraries), `layers` (the layer sweep), `hf_models` (transformers architectures), `llm`,
`executorch_backend` (etc's ExecuTorch backend against XNNPACK in one runtime), `profiling`; and the
kernel benches `gemm` and `windows`. `common` holds what they share: timing, interleaving, the
ExecuTorch reference programs, the child-process protocol and the table cells.
"""
