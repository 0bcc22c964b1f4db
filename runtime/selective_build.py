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

The file is ExecuTorch's `selected_operators.yaml` (written as JSON, which is YAML):
each operator with the programs that need it in its `debug_info` (a list for a fleet
of models shows why an op is in), the backends as `backend:<id>` build features. So
ExecuTorch's build reads etc's list, and etc's runtime reads the list ExecuTorch's
`gen_oplist` writes for a program.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from etc.errors import BackendError, EtcError, KernelNotFoundError

__all__ = ["SelectiveBuild"]



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
        from etc.runtime.method import ensure_kernels_registered

        ensure_kernels_registered()
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
    def to_selected_operators(self) -> dict:
        """ExecuTorch's `selected_operators.yaml` content (what its `gen_oplist` writes and torchgen's
        SelectiveBuilder reads): the operators, and the backends as `backend:<id>` build features."""
        programs = list(dict.fromkeys(u for users in self.operators.values() for u in users))
        backend_users = [f"{_BACKEND}{b}{_USED_BY}{u}" for b, users in sorted(self.backends.items()) for u in users]
        return {"operators": {name: {"is_root_operator": True, "is_used_for_training": True,
                                     "include_all_overloads": False, "debug_info": list(users)}
                              for name, users in sorted(self.operators.items())},
                "custom_classes": [], "build_features": [f"{_BACKEND}{b}" for b in sorted(self.backends)],
                "include_all_non_op_selectives": False, "include_all_operators": False, "kernel_metadata": {},
                "et_kernel_metadata": {}, "debug_info": programs + backend_users}

    def save(self, path) -> None:
        """Write `selected_operators.yaml` (as JSON, which is YAML): ExecuTorch's build reads it as is."""
        with open(path, "w") as f:
            json.dump(self.to_selected_operators(), f, indent=1)

    @classmethod
    def load(cls, path) -> "SelectiveBuild":
        """A `selected_operators.yaml`: ours, or ExecuTorch's `gen_oplist` output (real YAML needs PyYAML)."""
        where = os.fspath(path)
        try:
            with open(path) as f:
                text = f.read()
        except OSError as error:
            raise EtcError(f"cannot read selective build list '{where}': {error.strerror}") from None
        try:
            document = json.loads(text)
        except ValueError:
            try:
                import yaml
            except ImportError:
                raise EtcError(f"'{where}' is YAML, not JSON: reading it needs PyYAML") from None
            try:
                document = yaml.safe_load(text)
            except yaml.YAMLError as error:
                raise EtcError(f"'{where}' is not a selected_operators.yaml: {error}") from None
        if not isinstance(document, dict) or not isinstance(document.get("operators"), dict):
            raise EtcError(f"'{where}' is not a selected_operators.yaml (no 'operators' table)")
        if document.get("include_all_operators"):
            raise EtcError(f"'{where}' selects all operators: a runtime built from it would restrict nothing "
                           "(use Runtime.get())")
        operators = {name: [str(u) for u in ((entry or {}).get("debug_info") or [])]
                     for name, entry in document["operators"].items()}
        backends = {feature[len(_BACKEND):]: [] for feature in document.get("build_features") or []
                    if str(feature).startswith(_BACKEND)}
        for line in document.get("debug_info") or []:
            line = str(line)
            if line.startswith(_BACKEND) and _USED_BY in line:
                backend, user = line[len(_BACKEND):].split(_USED_BY, 1)
                if backend in backends:
                    _add(backends, backend, user)
        return cls(operators=operators, backends=backends)


_BACKEND = "backend:"
_USED_BY = " used by "


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
