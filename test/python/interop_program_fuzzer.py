"""The program fuzzer's ExecuTorch modes (`et-raw`, `et-table`, see program_fuzzer.py): a mutated
program loaded by stock ExecuTorch with etc's cpu backend (`runtime/executorch_backend/`).

ExecuTorch is only the reference etc is compared against, so the fuzzer itself never imports it:
its parent calls `build_backend` before starting a worker for these modes, the worker started
with `--executorch` calls `start_worker`, and each case of these modes runs through `run`.
"""

from __future__ import annotations

MODES = ("et-raw", "et-table")  # run by a worker with ExecuTorch's runtime and etc's backend


def build_backend() -> None:
    """Build etc's ExecuTorch backend once, in the parent: a worker that had to build it would time out."""
    from etc.runtime import executorch_backend

    executorch_backend.build()


def start_worker() -> None:
    """Load ExecuTorch's runtime and etc's backend into this worker (built by the parent: instant)."""
    import executorch.runtime  # noqa: F401

    from etc.runtime import executorch_backend

    executorch_backend.load()


def run(sample, data: bytes, mode: str, digest) -> tuple[str, str]:
    """The program on stock ExecuTorch with etc's cpu backend: ("ok", digest) | ("error", message). Any
    exception ExecuTorch raises is its refusal; what must never happen is a crash or a hang."""
    import torch
    from executorch.runtime import Runtime as ExecuTorchRuntime

    try:
        program = ExecuTorchRuntime.get().load_program(data)
        digests = []
        for method_name, inputs in sample.runs:
            method = program.load_method(method_name)
            if mode == "et-table":
                continue  # loaded, never run: a re-signed blob may describe any code
            outputs = method.execute([torch.from_numpy(x.copy()) for x in inputs])
            digests.append(digest([o.numpy() for o in outputs]))
        return "ok", "/".join(digests)
    except Exception as error:  # noqa: BLE001  (ExecuTorch raises RuntimeError or ValueError)
        return "error", f"ExecuTorch {type(error).__name__}: {' '.join(str(error).split())[:300]}"
