"""The thin runtime: load a `.pte` program, own its planned memory, run its instructions.

    from etc.runtime import Runtime
    method = Runtime.get().load_program("model.pte").load_method("forward")
    outputs = method.execute([x])

Kernels (`etc.runtime.kernels`) are numpy implementations of the out-variant
operators, plus ExecuTorch's primitive operators (`etc.runtime.prim_ops`);
delegates run on registered backends (`etc.runtime.backends`).
`register_kernel("mylib::twice.out", fn)` gives a user's custom operator its kernel.
"""

from etc.runtime.backends import (Backend, get_backend, is_available, register_backend, registered_backends,
                                  unregister_backend)
from etc.runtime.kernels.registry import register_kernel
from etc.runtime.method import Method, MethodMeta, TensorInfo
from etc.runtime.runtime import BackendRegistry, OperatorRegistry, Program, Runtime, Verification

__all__ = ["Runtime", "Program", "Method", "MethodMeta", "TensorInfo", "Backend", "register_backend",
           "unregister_backend", "get_backend", "registered_backends", "is_available", "BackendRegistry",
           "OperatorRegistry", "Verification", "register_kernel"]
