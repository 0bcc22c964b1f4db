"""etc: an ahead-of-time compiler and thin runtime for PyTorch models on edge devices.

The pipeline, stage by stage (see ARCHITECTURE.md):

    torch.export -> import_program (aten dialect) -> to_edge (edge dialect)
      -> to_backend (partitioning, delegation) -> to_executorch (memory planning,
      emission of a .pte program) -> runtime.Runtime.get().load_program(...)

Public names are imported lazily so that `import etc` stays cheap and so that a
tool that needs only the runtime never imports torch or MLIR.
"""

from importlib import import_module as _import_module

__all__ = [
    "import_program",
    "to_edge",
    "EtcError",
]

_LAZY = {
    "import_program": ("etc.compiler.importer", "import_program"),
    "to_edge": ("etc.compiler.program", "to_edge"),
    "EdgeProgram": ("etc.compiler.program", "EdgeProgram"),
    "ExecutorchProgram": ("etc.compiler.program", "ExecutorchProgram"),
    "EdgeCompileConfig": ("etc.compiler.program", "EdgeCompileConfig"),
    "ExecutorchBackendConfig": ("etc.compiler.program", "ExecutorchBackendConfig"),
    "Partitioner": ("etc.compiler.delegation", "Partitioner"),
}

from etc.errors import EtcError  # noqa: E402  (tiny module, no heavy imports)


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(_import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'etc' has no attribute {name!r}")
