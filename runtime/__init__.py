"""The thin runtime: load a `.pte` program, own its planned memory, run its instructions.

    from etc.runtime import Runtime
    method = Runtime.get().load_program("model.pte").load_method("forward")
    outputs = method.execute([x])

Kernels (`etc.runtime.kernels`) are numpy implementations of the Core ATen
out-variant operators; delegates run on registered backends
(`etc.runtime.backends`).
"""

from etc.runtime.backends import Backend, get_backend, register_backend, registered_backends
from etc.runtime.method import Method, MethodMeta, TensorInfo
from etc.runtime.runtime import Program, Runtime

__all__ = ["Runtime", "Program", "Method", "MethodMeta", "TensorInfo", "Backend", "register_backend",
           "get_backend", "registered_backends"]
