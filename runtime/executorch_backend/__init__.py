"""etc's `cpu` delegate as an ExecuTorch backend: programs compiled with CpuPartitioner on stock ExecuTorch.

    import etc.runtime.executorch_backend as etc_backend
    etc_backend.load()                       # builds it once (CMake + the system C++ compiler), then loads it
    from executorch.runtime import Runtime
    Runtime.get().load_program("model.pte").load_method("forward").execute([x])

The backend is C++ in this folder (shipped with etc, so an installed etc builds it too): `cpu_backend.cpp`
(ExecuTorch's BackendInterface, registered as "cpu", the id etc's programs use), `blob.cpp` (the blob
format's checks), `image_loader.cpp` (the pre-linked image, mapped W^X), `inflate.cpp`, `cpu_features.cpp`;
`runner.cpp` is `etc_runner`, a command-line runner of any etc `.pte` on ExecuTorch's `extension::Module`.
They build against the executorch wheel (its headers, `libexecutorch.so`, CMake config), into a cache
directory keyed by the sources, the wheel and the target, so a build happens once per change.

ExecuTorch's Python runtime has no API to register a backend, but links the same `libexecutorch.so` (the
backend registry): a library loaded into the process with RTLD_GLOBAL registers where
`executorch.runtime` looks. etc never imports executorch for this: the wheel is found on the path.

AArch64: `build(target="aarch64-linux-gnu")` cross-compiles the backend and the runner with Debian's
`aarch64-linux-gnu-g++` against the AArch64 executorch wheel's libraries, which `make` downloads into the
virtual environment (`AARCH64_SDK`); the runner runs under `qemu-aarch64 -L /usr/aarch64-linux-gnu`
(`runner_command`).

Command line: `python -m etc.runtime.executorch_backend [--target aarch64-linux-gnu]` builds and prints
where the library and the runner are.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

from etc.errors import EtcError

__all__ = ["load", "build", "library_path", "runner_path", "runner_command", "TARGETS", "AARCH64_SDK"]

SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libetc_cpu_backend.so"
RUNNER = "etc_runner"
# Where `make` unpacks the AArch64 executorch wheel (lib/, include/, share/cmake/ of its package).
AARCH64_SDK = os.path.join(sys.prefix, "executorch-aarch64", "executorch")
# What each target builds with: its CMake toolchain file (None: the system compiler) and how its
# programs run on this machine (a prefix to the command line).
TARGETS = {
    "host": {"toolchain": None, "run": []},
    "aarch64-linux-gnu": {"toolchain": "aarch64-linux-gnu.cmake",
                          "run": ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]},
}

_LOADED: dict = {}


class BackendBuildError(EtcError):
    """The backend could not be built or loaded (no ExecuTorch package, CMake or compiler)."""


def executorch_root(target: str = "host") -> str:
    """The executorch package the backend builds against: the installed wheel (host), or the AArch64
    wheel `make` unpacks (`AARCH64_SDK`)."""
    if target != "host":
        if not os.path.exists(os.path.join(AARCH64_SDK, "share", "cmake", "executorch-config.cmake")):
            raise BackendBuildError(f"no AArch64 ExecuTorch SDK at {AARCH64_SDK}: `make executorch-aarch64` downloads "
                                    "the executorch==1.5.1 AArch64 wheel there")
        return AARCH64_SDK
    spec = importlib.util.find_spec("executorch")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise BackendBuildError("the ExecuTorch backend builds against the executorch package: "
                                "pip install --no-deps executorch==1.5.1")
    return list(spec.submodule_search_locations)[0]


def _sources() -> list[str]:
    return sorted(f for f in os.listdir(SOURCE_DIR) if f.endswith((".cpp", ".h", ".cmake")) or f == "CMakeLists.txt")


def build_key(target: str = "host") -> str:
    """What a build depends on: the sources, the ExecuTorch package it links and the target."""
    if target not in TARGETS:
        raise BackendBuildError(f"unknown target '{target}' (one of {', '.join(TARGETS)})")
    digest = hashlib.sha256()
    for name in _sources():
        with open(os.path.join(SOURCE_DIR, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read() + b"\0")
    root = executorch_root(target)
    digest.update(os.path.realpath(root).encode())  # the runner's run path names it
    for name in ("share/cmake/executorch-config-version.cmake", "lib/libexecutorch.so"):
        path = os.path.join(root, name)
        if os.path.exists(path):  # the package's version, and its runtime's size (another build of it)
            with open(path, "rb") as f:
                digest.update(f.read(4096) + str(os.path.getsize(path)).encode())
    return f"{target}-{digest.hexdigest()[:16]}"


def cache_root() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "etc", "executorch-backend")


def build(target: str = "host") -> str:
    """The directory holding the built library and runner for `target`, building them first if the
    cache has no build of these sources (one process builds; others wait on a lock)."""
    import fcntl

    key = build_key(target)
    out = os.path.join(cache_root(), key)
    if os.path.exists(os.path.join(out, LIBRARY)) and os.path.exists(os.path.join(out, RUNNER)):
        return out
    os.makedirs(cache_root(), exist_ok=True)
    with open(os.path.join(cache_root(), f"{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(out, LIBRARY)) and os.path.exists(os.path.join(out, RUNNER)):
            return out
        _compile(target, out)
    return out


def _run(command: list[str], what: str) -> None:
    try:
        proc = subprocess.run(command, capture_output=True, text=True)
    except FileNotFoundError:
        raise BackendBuildError(f"building the ExecuTorch backend needs `{command[0]}` (not found)") from None
    if proc.returncode != 0:
        raise BackendBuildError(f"building the ExecuTorch backend: {what} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")


def _compile(target: str, out: str) -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BackendBuildError("building the ExecuTorch backend needs CMake (3.19 or newer)")
    work = tempfile.mkdtemp(prefix=f"{os.path.basename(out)}.", dir=cache_root())
    try:
        configure = [cmake, "-S", SOURCE_DIR, "-B", work, f"-DEXECUTORCH_ROOT={executorch_root(target)}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        toolchain = TARGETS[target]["toolchain"]
        if toolchain:
            configure.append(f"-DCMAKE_TOOLCHAIN_FILE={os.path.join(SOURCE_DIR, toolchain)}")
        _run(configure, "configuring (cmake)")
        _run([cmake, "--build", work, "--parallel", str(os.cpu_count() or 1)], "compiling")
        staged = work + ".out"
        os.makedirs(staged)
        for name in (LIBRARY, RUNNER):
            shutil.copy2(os.path.join(work, name), os.path.join(staged, name))
        shutil.rmtree(out, ignore_errors=True)  # a build interrupted before (we hold the lock)
        os.replace(staged, out)  # whole builds only: a reader sees none or all of it
    finally:
        shutil.rmtree(work, ignore_errors=True)


def library_path(target: str = "host") -> str:
    return os.path.join(build(target), LIBRARY)


def runner_path(target: str = "host") -> str:
    return os.path.join(build(target), RUNNER)


def runner_command(target: str = "host") -> list[str]:
    """The command line prefix that runs `etc_runner` for `target` on this machine."""
    return [*TARGETS[target]["run"], runner_path(target)]


def load() -> str:
    """Build (if needed) and load the backend into this process, so that ExecuTorch's runtime
    (`executorch.runtime`, or any C++ code of this process linking libexecutorch.so) runs etc's `cpu`
    delegates. Idempotent; returns the library's path."""
    path = library_path("host")
    if path not in _LOADED:
        try:
            library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as error:
            raise BackendBuildError(f"cannot load the ExecuTorch backend {path}: {error}") from None
        status = library.etc_cpu_backend_registration()
        if status != 0:
            raise BackendBuildError(f"the ExecuTorch backend did not register as 'cpu' (ExecuTorch error {status:#x}: "
                                    "another library registered a backend of that name first)")
        _LOADED[path] = library
    return path


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m etc.runtime.executorch_backend",
                                     description="Build etc's ExecuTorch backend and runner; print their paths.")
    parser.add_argument("--target", default="host", choices=sorted(TARGETS))
    args = parser.parse_args(argv)
    try:
        print(f"library: {library_path(args.target)}")
        print(f"runner:  {' '.join(runner_command(args.target))}")
    except EtcError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
