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

import enum
import os

from etc.errors import EtcError, ProgramError
from etc.runtime import log
from etc.runtime.method import Method, MethodMeta, method_meta
from etc.schema import PteFile, validate_pte
from etc.schema import deserialize_pte as read_pte

__all__ = ["Runtime", "Program", "BackendRegistry", "OperatorRegistry", "Verification"]


class Verification(enum.Enum):
    """How much `load_program` checks, named as in `executorch.runtime`.

    Both check the whole structure (every offset, index and size). `InternalConsistency`
    (the default) also checks etc's CRC of the program data and of every segment; `Minimal`
    trusts the bytes' values (a flipped weight then goes unnoticed). A cpu delegate's blob is
    checked by its own CRC either way: code is never run from an unchecked blob.
    """

    Minimal = 0
    InternalConsistency = 1


class Program:
    """A loaded program: its methods by name, each loaded on first request."""

    def __init__(self, pte: PteFile, *, source: str = "<bytes>", run_record=None, kernels=None):
        self.pte = pte
        self.source = source
        self._plans = {plan.name: plan for plan in pte.program.execution_plan or []}
        self._methods: dict[str, Method] = {}
        # `enable_etdump=True`: every method of this program records into this one RunRecord.
        self.run_record = run_record
        self._kernels = kernels  # a selective-build kernel table, or None for every registered kernel
        log.debug(f"loaded program {source}: methods {', '.join(self._plans) or 'none'}")

    @property
    def method_names(self) -> set[str]:
        """The method names, as a set (as `executorch.runtime` gives them)."""
        return set(self._plans)

    @property
    def num_methods(self) -> int:
        return len(self._plans)

    def _plan(self, name: str):
        plan = self._plans.get(name)
        if plan is None:
            raise ProgramError(f"program {self.source} has no method '{name}' "
                               f"(methods: {', '.join(self._plans) or 'none'})")
        return plan

    def load_method(self, name: str = "forward") -> Method:
        """The method `name`, loaded (memory planned, kernels bound, delegates initialised) once."""
        method = self._methods.get(name)
        if method is None:
            method = Method(self.pte, self._plan(name), kernels=self._kernels, run_record=self.run_record)
            self._methods[name] = method
        return method

    def metadata(self, name: str = "forward") -> MethodMeta:
        """Method `name`'s inputs, outputs, planned buffers, backends and operators, without loading it."""
        return method_meta(self._plan(name))

    def write_etdump_result_to_file(self, etdump_path, debug_buffer_path=None) -> None:
        """Write what the methods recorded (`enable_etdump=True`): the events to `etdump_path`, the
        intermediate outputs (`debug_buffer_size > 0`) to `debug_buffer_path`. etc's own formats
        (`etc.devtools.RunRecord.load` reads them back), under ExecuTorch's method name."""
        if self.run_record is None:
            raise EtcError(f"program {self.source} was loaded without enable_etdump=True: it recorded nothing")
        self.run_record.save(etdump_path, debug_buffer_path)

    def __repr__(self) -> str:
        return f"Program({self.source}, methods={list(self._plans)})"


class BackendRegistry:
    """The backends programs can delegate to (`Runtime.get().backend_registry`); only the selected
    ones for a runtime built from a selective build."""

    def __init__(self, selected: set | None = None):
        self._selected = selected

    @property
    def registered_backend_names(self) -> list[str]:
        from etc.runtime.backends import registered_backends

        return [b for b in registered_backends() if self._selected is None or b in self._selected]

    def is_available(self, backend_id: str) -> bool:
        from etc.runtime.backends import is_available

        return (self._selected is None or backend_id in self._selected) and is_available(backend_id)


class OperatorRegistry:
    """The operators the runtime has kernels for (`Runtime.get().operator_registry`); only the
    selected ones for a runtime built from a selective build."""

    def __init__(self, selected: set | None = None):
        self._selected = selected

    @property
    def operator_names(self) -> set[str]:
        from etc.runtime.kernels.registry import registered_kernels
        from etc.runtime.method import ensure_kernels_registered

        ensure_kernels_registered()
        names = set(registered_kernels())
        return names if self._selected is None else names & self._selected


class Runtime:
    """The runtime singleton: `Runtime.get()`.

    The portable kernels' matrix products run on numpy's BLAS, whose thread count is
    process-wide; `set_num_threads(n)` chooses it (on a small or shared machine one
    thread is often much faster than busy-waiting ones). The environment variable
    `ETC_NUM_THREADS`, if set, is applied when the runtime is first created.
    """

    _instance: "Runtime | None" = None

    def __init__(self, *, selective_build=None):
        # A selective build (etc.runtime.selective_build): only its kernels and backends exist here.
        self._selection = selective_build
        self.backend_registry = BackendRegistry(set(selective_build.backends) if selective_build else None)
        self.operator_registry = OperatorRegistry(set(selective_build.operators) if selective_build else None)
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

    @classmethod
    def from_selective_build(cls, selection) -> "Runtime":
        """A runtime restricted to a selective build (an `etc.runtime.selective_build.SelectiveBuild` or its
        file): its methods bind only the listed kernels, and `load_program` refuses a program that needs an
        operator or backend outside the list, naming it (as a device build without that kernel would)."""
        from etc.runtime.selective_build import SelectiveBuild

        if not isinstance(selection, SelectiveBuild):
            selection = SelectiveBuild.load(selection)
        return cls(selective_build=selection)

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

    def load_program(self, data, *, verification: Verification = Verification.InternalConsistency,
                     enable_etdump: bool = False, debug_buffer_size: int = 0) -> Program:
        """A program from a `.pte` path, its bytes, a binary file object, or a PteFile.

        `verification` (ExecuTorch's name): `Verification.InternalConsistency`, the default,
        also checks etc's per-segment checksums, so a corrupted file raises ProgramError naming
        the segment instead of computing with damaged weights; `Verification.Minimal` skips them
        (a large program loads faster on a tight device). The structure is checked either way:
        no setting lets a malformed file index out of bounds.

        `enable_etdump=True` records every instruction's time (and the whole execute's) into
        `program.run_record` (an `etc.devtools.RunRecord`, ExecuTorch's ETDump in etc's format;
        `program.write_etdump_result_to_file(path)` saves it); `debug_buffer_size` > 0 also keeps
        the intermediate output of every instruction, up to that many bytes over all runs (as
        ExecuTorch's debug buffer). Without `enable_etdump` the methods run untimed, at no cost.
        """
        if debug_buffer_size and not enable_etdump:
            raise EtcError("debug_buffer_size is the intermediate-output budget of the run record: "
                           "it needs enable_etdump=True")
        run_record = None
        if enable_etdump:
            from etc.runtime.run_record import RunRecord

            run_record = RunRecord(debug_buffer_size=int(debug_buffer_size))
        if not isinstance(verification, Verification):
            raise EtcError(f"verification must be Verification.Minimal or Verification.InternalConsistency, "
                           f"got {verification!r}")
        pte, source = self._read_program(data, verification)
        if self._selection is not None:
            self._selection.check(pte, source)
            return Program(pte, source=source, run_record=run_record, kernels=self._selection.kernel_table())
        return Program(pte, source=source, run_record=run_record)

    def _read_program(self, data, verification: Verification) -> tuple[PteFile, str]:
        def deserialize_pte(blob: bytes) -> PteFile:
            return read_pte(blob, verify_checksums=verification == Verification.InternalConsistency)

        if isinstance(data, PteFile):
            validate_pte(data)  # built in memory: the same checks a file gets, so the runtime may index freely
            return data, "<PteFile>"
        if isinstance(data, (str, os.PathLike)):
            path = os.fspath(data)
            try:
                with open(path, "rb") as f:
                    blob = f.read()
            except OSError as error:
                raise ProgramError(f"cannot read program '{path}': {error.strerror}") from None
            return deserialize_pte(blob), path
        if isinstance(data, (bytes, bytearray, memoryview)):
            return deserialize_pte(bytes(data)), "<bytes>"
        if hasattr(data, "read"):
            blob = data.read()
            if isinstance(blob, (bytes, bytearray)):
                return deserialize_pte(bytes(blob)), getattr(data, "name", "<file>")
        raise ProgramError(f"load_program takes a path, bytes, a binary file or a PteFile, "
                           f"got {type(data).__name__}")
