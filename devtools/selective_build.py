"""Selective build: the kernels and backends a set of programs needs, and a runtime restricted to them.

    selection = SelectiveBuild.from_programs("a.pte", "b.pte")   # or ExecutorchPrograms, bytes, PteFiles
    selection.save("selected.json")                              # `etc select a.pte b.pte -o selected.json`
    runtime = Runtime.from_selective_build("selected.json")
    runtime.load_program("a.pte")                                # fine
    runtime.load_program("c.pte")                                # KernelNotFoundError naming what c needs

A device build links only the kernels its programs call (ExecuTorch's
`selected_operators.yaml`); the list is what decides it, so it is checked where
it can fail early: a restricted runtime refuses, at load_program, a program that
names an operator or a delegate backend outside the list, naming each one and the
method and instruction that needs it, instead of failing on the device at the
first call. Methods of a restricted runtime bind their kernels from the list only,
so nothing outside it can run by accident.

The file is JSON: `{"operators": {name: {"debug_info": [programs]}}, "backends":
{id: {"debug_info": [...]}}}` (ExecuTorch's `operators` shape; each entry says which
programs need it, so a list for a fleet of models shows why an op is in).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from etc.errors import BackendError, EtcError, KernelNotFoundError

__all__ = ["SelectiveBuild"]

FORMAT = "etc-selective-build"
FORMAT_VERSION = 1


def _pte_of(program):
    """(PteFile, a name for debug_info) of an ExecutorchProgram, runtime Program, PteFile, bytes or path."""
    from etc.schema import PteFile, deserialize_pte

    if isinstance(program, PteFile):
        return program, "<PteFile>"
    pte = getattr(program, "pte", None)
    if isinstance(pte, PteFile):
        return pte, getattr(program, "source", None) or "<program>"
    if isinstance(program, (bytes, bytearray)):
        return deserialize_pte(bytes(program)), "<bytes>"
    if isinstance(program, (str, os.PathLike)):
        with open(program, "rb") as f:
            return deserialize_pte(f.read()), os.path.basename(os.fspath(program))
    raise EtcError(f"selective build: expected a program (ExecutorchProgram, .pte path or bytes), "
                   f"got {type(program).__name__}")


class _SelectedKernels:
    """The kernel lookup a restricted runtime's methods bind from: only the selected operators."""

    def __init__(self, operators):
        self.operators = frozenset(operators)

    def __getitem__(self, name: str):
        if name not in self.operators:
            raise KernelNotFoundError(f"operator '{name}' is not in this runtime's selective build", operator=name)
        from etc.runtime.kernels.registry import get_kernel
        from etc.runtime.method import _ensure_kernels_registered

        _ensure_kernels_registered()
        return get_kernel(name)


@dataclass
class SelectiveBuild:
    operators: dict = field(default_factory=dict)  # operator name -> [program names needing it]
    backends: dict = field(default_factory=dict)  # backend id -> [program names]

    @classmethod
    def from_programs(cls, *programs) -> "SelectiveBuild":
        from etc.runtime.method import operator_name

        selection = cls()
        for program in programs:
            pte, name = _pte_of(program)
            for plan in pte.program.execution_plan or []:
                for operator in plan.operators or []:
                    _add(selection.operators, operator_name(operator), name)
                for delegate in plan.delegates or []:
                    _add(selection.backends, delegate.id, name)
        return selection

    def __or__(self, other: "SelectiveBuild") -> "SelectiveBuild":
        merged = SelectiveBuild()
        for source in (self, other):
            for table, into in ((source.operators, merged.operators), (source.backends, merged.backends)):
                for key, users in table.items():
                    for user in users:
                        _add(into, key, user)
        return merged

    # ------------------------------------------------------------------ the runtime's side
    def kernel_table(self) -> _SelectedKernels:
        return _SelectedKernels(self.operators)

    def check(self, pte, source: str = "<program>") -> None:
        """Raise if `pte` needs an operator or backend outside the selection (naming each)."""
        from etc.runtime.method import operator_name

        missing_ops, missing_backends = [], []
        for plan in pte.program.execution_plan or []:
            for op_index, operator in enumerate(plan.operators or []):
                name = operator_name(operator)
                if name not in self.operators:
                    missing_ops.append((name, plan.name, _first_use(plan, op_index)))
            for delegate in plan.delegates or []:
                if delegate.id not in self.backends:
                    missing_backends.append((delegate.id, plan.name))
        if missing_ops:
            name, method, instruction = missing_ops[0]
            others = sorted({n for n, _, _ in missing_ops[1:]} - {name})
            notes = [f"the program also needs {', '.join(others)}"] if others else []
            notes.append(f"this runtime was built for {len(self.operators)} operator(s); add the program to the "
                         "selection (SelectiveBuild.from_programs) to include what it needs")
            raise KernelNotFoundError(f"program {source} needs operator '{name}', which is outside this runtime's "
                                      "selective build", method=method, instruction=instruction, operator=name,
                                      notes=notes)
        if missing_backends:
            backend, method = missing_backends[0]
            raise BackendError(f"program {source} delegates to backend '{backend}', which is outside this "
                               f"runtime's selective build (backends: {', '.join(sorted(self.backends)) or 'none'})",
                               method=method)

    # ------------------------------------------------------------------ files
    def save(self, path) -> None:
        document = {"format": FORMAT, "version": FORMAT_VERSION,
                    "operators": {k: {"debug_info": v} for k, v in sorted(self.operators.items())},
                    "backends": {k: {"debug_info": v} for k, v in sorted(self.backends.items())}}
        with open(path, "w") as f:
            json.dump(document, f, indent=1)

    @classmethod
    def load(cls, path) -> "SelectiveBuild":
        try:
            with open(path) as f:
                document = json.load(f)
        except OSError as error:
            raise EtcError(f"cannot read selective build list '{os.fspath(path)}': {error.strerror}") from None
        except ValueError:
            raise EtcError(f"'{os.fspath(path)}' is not a selective build list (not JSON)") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise EtcError(f"'{os.fspath(path)}' is not an etc selective build list")
        if document.get("version") != FORMAT_VERSION:
            raise EtcError(f"selective build list '{os.fspath(path)}' has version {document.get('version')}, "
                           f"this etc reads version {FORMAT_VERSION}")
        return cls(operators={k: list(v.get("debug_info", [])) for k, v in document["operators"].items()},
                   backends={k: list(v.get("debug_info", [])) for k, v in document["backends"].items()})


def _add(table: dict, key: str, user: str) -> None:
    users = table.setdefault(key, [])
    if user not in users:
        users.append(user)


def _first_use(plan, op_index: int):
    from etc.schema import program as S

    for chain in plan.chains or []:
        for position, instruction in enumerate(chain.instructions or []):
            if isinstance(instruction.instr_args, S.KernelCall) and instruction.instr_args.op_index == op_index:
                return position
    return None
