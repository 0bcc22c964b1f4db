"""`Runtime.get().load_program(...)`: the entry point, shaped like `executorch.runtime`.

    from etc.runtime import Runtime
    program = Runtime.get().load_program("model.pte")   # a path, bytes, a file object or a PteFile
    print(program.method_names, program.metadata("forward"))
    method = program.load_method("forward")
    outputs = method.execute([x])

Loading a program validates the whole file (`etc.schema.deserialize_pte`): a
truncated or corrupted program raises ProgramError saying what is wrong and
where, before any memory is planned or any kernel runs. `metadata(name)` reads a
method's interface from the program alone; `load_method(name)` allocates its
arenas, binds its kernels and initialises its delegates, once: the program keeps
the loaded method (as ExecuTorch's Python runtime does), so state held in its
mutable buffers lives as long as the program.
"""

from __future__ import annotations

import os

from etc.errors import EtcError, ProgramError
from etc.runtime.method import Method, MethodMeta, method_meta
from etc.schema import PteFile, deserialize_pte, validate_pte

__all__ = ["Runtime", "Program", "BackendRegistry", "OperatorRegistry"]


class Program:
    """A loaded program: its methods by name, each loaded on first request."""

    def __init__(self, pte: PteFile, *, source: str = "<bytes>"):
        self.pte = pte
        self.source = source
        self._plans = {plan.name: plan for plan in pte.program.execution_plan or []}
        self._methods: dict[str, Method] = {}

    @property
    def method_names(self) -> list[str]:
        """The method names, in program order."""
        return list(self._plans)

    @property
    def num_methods(self) -> int:
        return len(self._plans)

    def _plan(self, name: str):
        plan = self._plans.get(name)
        if plan is None:
            raise ProgramError(f"program {self.source} has no method '{name}' "
                               f"(methods: {', '.join(self.method_names) or 'none'})")
        return plan

    def load_method(self, name: str = "forward") -> Method:
        """The method `name`, loaded (memory planned, kernels bound, delegates initialised) once."""
        method = self._methods.get(name)
        if method is None:
            method = Method(self.pte, self._plan(name))
            self._methods[name] = method
        return method

    def metadata(self, name: str = "forward") -> MethodMeta:
        """Method `name`'s inputs, outputs, planned buffers, backends and operators, without loading it."""
        return method_meta(self._plan(name))

    def __repr__(self) -> str:
        return f"Program({self.source}, methods={self.method_names})"


class BackendRegistry:
    """The backends programs can delegate to (`Runtime.get().backend_registry`)."""

    @property
    def registered_backend_names(self) -> list[str]:
        from etc.runtime.backends import registered_backends

        return registered_backends()

    def is_available(self, backend_id: str) -> bool:
        from etc.runtime.backends import is_available

        return is_available(backend_id)


class OperatorRegistry:
    """The operators the runtime has kernels for (`Runtime.get().operator_registry`)."""

    @property
    def operator_names(self) -> set[str]:
        from etc.runtime.kernels.registry import registered_kernels
        from etc.runtime.method import _ensure_kernels_registered

        _ensure_kernels_registered()
        return set(registered_kernels())


class Runtime:
    """The runtime singleton: `Runtime.get()`.

    The portable kernels' matrix products run on numpy's BLAS, whose thread count is
    process-wide; `set_num_threads(n)` chooses it (on a small or shared machine one
    thread is often much faster than busy-waiting ones). The environment variable
    `ETC_NUM_THREADS`, if set, is applied when the runtime is first created.
    """

    _instance: "Runtime | None" = None

    def __init__(self):
        self.backend_registry = BackendRegistry()
        self.operator_registry = OperatorRegistry()
        threads = os.environ.get("ETC_NUM_THREADS", "").strip()
        if threads:
            try:
                count = int(threads)
            except ValueError:
                raise EtcError(f"ETC_NUM_THREADS must be a positive integer, got {threads!r}") from None
            self.set_num_threads(count)

    @classmethod
    def get(cls) -> "Runtime":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    @property
    def num_threads(self) -> int | None:
        """The kernels' BLAS thread count (None if it cannot be read)."""
        from etc.runtime.kernels.threads import blas_threads

        return blas_threads()

    def set_num_threads(self, count: int) -> bool:
        """Set the kernels' BLAS thread count for the whole process; False if the BLAS has no such knob."""
        if int(count) < 1:
            raise ValueError(f"the thread count must be at least 1, got {count}")
        from etc.runtime.kernels.threads import set_blas_threads

        return set_blas_threads(int(count))

    def load_program(self, data) -> Program:
        """A program from a `.pte` path, its bytes, a binary file object, or a PteFile."""
        if isinstance(data, PteFile):
            validate_pte(data)  # built in memory: the same checks a file gets, so the runtime may index freely
            return Program(data, source="<PteFile>")
        if isinstance(data, (str, os.PathLike)):
            path = os.fspath(data)
            try:
                with open(path, "rb") as f:
                    blob = f.read()
            except OSError as error:
                raise ProgramError(f"cannot read program '{path}': {error.strerror}") from None
            return Program(deserialize_pte(blob), source=path)
        if isinstance(data, (bytes, bytearray, memoryview)):
            return Program(deserialize_pte(bytes(data)))
        if hasattr(data, "read"):
            blob = data.read()
            if isinstance(blob, (bytes, bytearray)):
                return Program(deserialize_pte(bytes(blob)), source=getattr(data, "name", "<file>"))
        raise ProgramError(f"load_program takes a path, bytes, a binary file or a PteFile, "
                           f"got {type(data).__name__}")
