"""The compile record: every instruction of a program mapped back to the model (ExecuTorch's ETRecord).

`to_executorch(generate_etrecord=True)` builds one while the MLIR module is still
alive (`program.get_etrecord()`, `.save(path)`, `CompileRecord.load(path)`). Per
method, per instruction in chain order:

- `name`: what the runtime calls it (the kernel `aten::add.out`, `delegate 'cpu'`),
  the same label the run record's events carry;
- `ops`: the edge ops it runs, each with its aten op, the FX node it came from and
  the user's `file:line`; one op for a kernel call, every op of the partition (in
  program order) for a delegate call, so a delegate row can be broken down;
- `outputs`: for each tensor it writes (an EValue index of the plan), the FX node
  whose value that is, and which of the node's results, so intermediate outputs can
  be compared with eager ones by node name.

A fused op's location is a FusedLoc of the nodes it merged (conv + batch norm):
its value is the one of the last of them, its source line the first's.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from etc.errors import EtcError
from etc.ir.ops import as_operation

__all__ = ["OpRecord", "InstructionRecord", "CompileRecord", "build_compile_record"]

FORMAT = "etc-compile-record"
FORMAT_VERSION = 1


@dataclass
class OpRecord:
    """One op of the compiled program and where in the model it comes from."""

    op: str  # the MLIR op: "edge.convolution", "tensor.dim", "ml_program.global_store"
    aten: str | None  # the ATen operator it stands for: "aten::convolution"
    node: str | None  # the FX node (of the decomposed graph) whose value it computes
    file: str | None = None
    line: int | None = None

    @property
    def source(self) -> str | None:
        return f"{os.path.basename(self.file)}:{self.line}" if self.file else None


@dataclass
class InstructionRecord:
    chain: int
    instruction: int
    name: str
    kind: str  # see _kind: kernel, delegate, state, size, copy, jump, move
    ops: list = field(default_factory=list)  # OpRecord
    outputs: dict = field(default_factory=dict)  # EValue index -> [node, result index]
    delegate: str | None = None  # the outlined function of a delegate call
    backend: str | None = None

    @property
    def source(self) -> str | None:
        """The user's line of the first op that has one."""
        return next((op.source for op in self.ops if op.source), None)


@dataclass
class CompileRecord:
    methods: dict = field(default_factory=dict)  # method -> [InstructionRecord]

    def instructions(self, method: str = "forward") -> list:
        if method not in self.methods:
            raise EtcError(f"the compile record has no method '{method}' (methods: {', '.join(self.methods)})")
        return self.methods[method]

    def instruction(self, method: str, chain: int, instruction: int) -> InstructionRecord | None:
        index = self.__dict__.get("_index")
        if index is None or len(index) != sum(len(records) for records in self.methods.values()):
            index = self.__dict__["_index"] = {(m, r.chain, r.instruction): r
                                               for m, records in self.methods.items() for r in records}
        return index.get((method, chain, instruction))

    def save(self, path) -> None:
        document = {"format": FORMAT, "version": FORMAT_VERSION,
                    "methods": {m: [asdict(r) for r in records] for m, records in self.methods.items()}}
        with open(path, "w") as f:
            json.dump(document, f)

    @classmethod
    def load(cls, path) -> "CompileRecord":
        try:
            with open(path) as f:
                document = json.load(f)
        except OSError as error:
            raise EtcError(f"cannot read compile record '{os.fspath(path)}': {error.strerror}") from None
        except ValueError:
            raise EtcError(f"'{os.fspath(path)}' is not an etc compile record (not JSON)") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise EtcError(f"'{os.fspath(path)}' is not an etc compile record")
        if document.get("version") != FORMAT_VERSION:
            raise EtcError(f"compile record '{os.fspath(path)}' has version {document.get('version')}, "
                           f"this etc reads version {FORMAT_VERSION}")
        methods = {}
        for method, records in document["methods"].items():
            methods[method] = [InstructionRecord(**{**r, "ops": [OpRecord(**o) for o in r["ops"]],
                                                    "outputs": {int(k): v for k, v in r["outputs"].items()}})
                               for r in records]
        return cls(methods=methods)


# ----------------------------------------------------------------------------- building
def _names(location) -> list[str]:
    """The NameLoc names inside `location`, in order (one per FX node the op came from)."""
    from torch_mlir import ir

    if isinstance(location, ir.NameLoc):
        return [location.name_str]
    if isinstance(location, ir.FusedLoc):
        return [name for inner in location.locations for name in _names(inner)]
    if isinstance(location, ir.CallSiteLoc):
        return _names(location.callee)
    return []


def _value_node(value) -> list | None:
    """[FX node, result index] of the value an op result stands for (None for a block argument)."""
    from torch_mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    names = _names(owner.location)
    if not names:
        return None
    return [names[-1], value.result_number]


def _op_record(op) -> OpRecord:
    from etc.ir.locations import source_position

    name = op.name
    aten = None
    if name.startswith(("edge.", "aten.")):
        from etc.dialects import op_info

        info = op_info(name)  # None for an op without a table entry: recorded without its aten name
        aten = info.torch_name if info is not None else None
    elif name == "tensor.dim":
        aten = "aten::sym_size.int"
    elif name == "ml_program.global_store":
        aten = "aten::copy_"
    names = _names(op.location)
    position = source_position(op.location)
    return OpRecord(op=name, aten=aten, node=names[-1] if names else None,
                    file=position.file if position else None, line=position.line if position else None)


# The runtime's labels of the instructions that are not calls (Method._compile).
_CONTROL_LABELS = {"JumpFalseCall": "jump_false", "MoveCall": "move", "FreeCall": "free"}


def _kind(op_name: str, call) -> str:
    """kernel, delegate, state (a buffer write), size (a size computed at run time), copy (a control-flow
    carry), jump or move."""
    from etc.schema import program as S

    if isinstance(call, S.DelegateCall):
        return "delegate"
    if isinstance(call, S.JumpFalseCall):
        return "jump"
    if isinstance(call, S.MoveCall):
        return "move"
    if op_name.startswith("edge."):
        return "kernel"
    if op_name == "ml_program.global_store":
        return "state"
    if op_name == "tensor.dim" or op_name.startswith("arith."):
        return "size"
    return "copy"


def build_compile_record(program_ir, instruction_ops: dict, pte) -> CompileRecord:
    """The record of an emitted program: `instruction_ops` from `emit_program`, `pte` what it emitted."""
    from torch_mlir import ir

    from etc.runtime.method import operator_name
    from etc.schema import program as S

    functions = {}
    for op in program_ir.module.body.operations:
        if op.operation.name == "func.func":
            functions[ir.StringAttr(op.attributes["sym_name"]).value] = op
    plans = {plan.name: plan for plan in pte.program.execution_plan}
    record = CompileRecord()
    with program_ir.context:
        for method, entries in instruction_ops.items():
            plan = plans[method]
            instructions = plan.chains[0].instructions
            records = []
            for position, ((op, results), instruction) in enumerate(zip(entries, instructions)):
                op = as_operation(op)
                call = instruction.instr_args
                entry = InstructionRecord(chain=0, instruction=position, name="", kind=_kind(op.name, call))
                if isinstance(call, S.KernelCall):
                    entry.name = operator_name(plan.operators[call.op_index])
                    entry.ops = [_op_record(op)]
                    outputs = list(zip(results, op.results))
                elif isinstance(call, S.DelegateCall):
                    backend = plan.delegates[call.delegate_index].id
                    entry.name, entry.backend = f"delegate '{backend}'", backend
                    entry.delegate = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                    body = functions[entry.delegate]
                    inner = [o.operation for o in body.regions[0].blocks[0].operations]
                    entry.ops = [_op_record(o) for o in inner
                                 if o.name not in ("func.return", "ml_program.global_load_const", "arith.constant")]
                    returned = list(inner[-1].operands)  # the partition's outputs, as its function returns them
                    outputs = list(zip(results, returned))
                else:  # control flow: named as the runtime labels it, located at its scf op
                    entry.name = _CONTROL_LABELS.get(type(call).__name__, type(call).__name__)
                    entry.ops = [_op_record(op)]
                    outputs = []
                for index, value in outputs:
                    node = _value_node(value)
                    if index is not None and node is not None:
                        entry.outputs[index] = node
                records.append(entry)
            record.methods[method] = records
    return record
