"""Running etc programs with `etc_runner` (ExecuTorch's C++ extension::Module with etc's cpu backend),
natively or for AArch64 under qemu-aarch64: the interop tests' shared helper."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest


def aarch64_available() -> str:
    """Why AArch64 runs cannot happen here ("" when they can). `make test` provides both."""
    from etc.runtime import executorch_backend

    if not shutil.which("qemu-aarch64") or not shutil.which("aarch64-linux-gnu-g++"):
        return "no qemu-aarch64 or aarch64-linux-gnu-g++ (`make toolchains` installs them)"
    if not os.path.exists(os.path.join(executorch_backend.AARCH64_SDK, "share", "cmake")):
        return "no AArch64 ExecuTorch SDK (`make executorch-aarch64` downloads it)"
    return ""


needs_aarch64 = pytest.mark.skipif(bool(aarch64_available()), reason=aarch64_available() or "ok")


def run(target: str, program: bytes, calls, tmp_path, *, tolerance: float = 1e-4, extra=()) -> list[str]:
    """Run each (method, inputs, expected outputs) of `calls` on `program` with the runner for `target`;
    every output must be within `tolerance` x max(1, |expected|) of its expected array. Returns the
    runner's outputs (stdout), one per call."""
    from etc.runtime import executorch_backend

    path = tmp_path / f"program-{target}.pte"
    path.write_bytes(program)
    printed = []
    for k, (method, inputs, expected) in enumerate(calls):
        args = [str(path), "--method", method]
        for i, x in enumerate(inputs):
            np.save(tmp_path / f"in{k}_{i}.npy", np.ascontiguousarray(np.asarray(x)))
            args += ["--input", str(tmp_path / f"in{k}_{i}.npy")]
        scale = max([1.0] + [float(np.abs(np.asarray(e, dtype=np.float64)).max(initial=0)) for e in expected])
        for i, e in enumerate(expected):
            np.save(tmp_path / f"ref{k}_{i}.npy", np.ascontiguousarray(np.asarray(e)))
            args += ["--expect", str(tmp_path / f"ref{k}_{i}.npy")]
        args += ["--atol", str(tolerance * scale), "--rtol", "0", *extra]
        proc = subprocess.run(executorch_backend.runner_command(target) + args, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"etc_runner ({target}) on {method}: exit {proc.returncode}\n{proc.stdout}\n" \
                                     f"{proc.stderr[-3000:]}"
        assert proc.stdout.count("matches") == len(expected), proc.stdout
        printed.append(proc.stdout)
    return printed
