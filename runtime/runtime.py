"""`Runtime.get().load_program(...)`: the entry point, shaped like `executorch.runtime`.

    from etc.runtime import Runtime
    program = Runtime.get().load_program("model.pte")      # path, bytes, or a PteFile
    method = program.load_method("forward")
    outputs = method.execute([x])

Loading validates the whole file (`etc.schema.deserialize_pte`): a truncated
or corrupted program raises ProgramError saying what is wrong, before any
memory is planned or any kernel runs.
"""

from __future__ import annotations

import os

from etc.errors import ProgramError
from etc.runtime.method import Method, MethodMeta
from etc.schema import PteFile, deserialize_pte


class Program:
    """A loaded program: its methods by name, loaded on demand."""

    def __init__(self, pte: PteFile, *, source: str = "<bytes>"):
        self.pte = pte
        self.source = source
        self._plans = {plan.name: plan for plan in pte.program.execution_plan or []}

    @property
    def method_names(self) -> list[str]:
        return list(self._plans)

    def load_method(self, name: str = "forward") -> Method:
        """Plan the method's memory, bind its kernels and initialise its delegates."""
        plan = self._plans.get(name)
        if plan is None:
            raise ProgramError(f"program {self.source} has no method '{name}' "
                               f"(methods: {', '.join(self.method_names) or 'none'})")
        return Method(self.pte, plan)

    def metadata(self, name: str = "forward") -> MethodMeta:
        return self.load_method(name).metadata

    def __repr__(self) -> str:
        return f"Program({self.source}, methods={self.method_names})"


class Runtime:
    _instance: "Runtime | None" = None

    @classmethod
    def get(cls) -> "Runtime":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def load_program(self, data) -> Program:
        """A program from a `.pte` path, its bytes, or a PteFile."""
        if isinstance(data, PteFile):
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
        raise ProgramError(f"load_program takes a path, bytes or a PteFile, got {type(data).__name__}")
