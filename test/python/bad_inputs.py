"""The bad-input table: each class of bad input a user can give etc and the error they get.

`CASES` is the table's source: (category, what the user did, a function doing it, the
error class expected). `test_bad_inputs.py` runs every case (each must raise exactly that
EtcError, never another exception) and checks that BAD_INPUTS.md is what `render()` makes of
them; after changing an error message, regenerate it:

    cd test/python && ../../.venv/bin/python bad_inputs.py > ../../BAD_INPUTS.md

Messages are shown with numbers, offsets and checksums as `N`/`<hex>` so that the table
does not change with every byte of a compiled program.
"""

from __future__ import annotations

import re
import struct
import sys

import numpy as np

_PROGRAMS: dict = {}


def _program(kind: str) -> bytes:
    """Small compiled programs, built once: `linear`, `cpu` (the same delegated), `dynamic` (shared Dim n>=2)."""
    if kind not in _PROGRAMS:
        import torch

        import etc
        from etc.targets.cpu import CpuPartitioner

        torch.manual_seed(0)
        if kind == "dynamic":
            class Pair(torch.nn.Module):
                def forward(self, a, b):
                    return a * 2 + b

            n = torch.export.Dim("n", min=2, max=8)
            ep = torch.export.export(Pair(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=({0: n}, {0: n}))
            edge = etc.to_edge(ep)
        else:
            ep = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
            edge = etc.to_edge(ep)
            if kind == "cpu":
                edge = edge.to_backend(CpuPartitioner())
        _PROGRAMS[kind] = edge.to_executorch().buffer
    return _PROGRAMS[kind]


def _load(data, **options):
    from etc.runtime import Runtime

    return Runtime.get().load_program(data, **options)


def _flip(data: bytes, position: int) -> bytes:
    out = bytearray(data)
    out[position] ^= 0x10
    return bytes(out)


def _weight_position(data: bytes) -> int:
    from etc.schema import deserialize_pte

    return data.index(max(deserialize_pte(data).constant_data, key=len)) + 3


def _execute(kind: str, *inputs):
    return _load(_program(kind)).load_method("forward").execute(list(inputs))


def _out_of_range_index() -> bytes:
    from etc.schema import deserialize_pte, serialize_pte

    pte = deserialize_pte(_program("linear"))
    pte.program.execution_plan[0].chains[0].instructions[0].instr_args.args[0] = 999
    return serialize_pte(pte)  # re-written with valid checksums: the structure itself is wrong


def _endless_loop():
    import torch

    import etc
    from etc.schema import JumpFalseCall, deserialize_pte, serialize_pte

    class Branch(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))

    x = np.ones(4, F32)
    pte = deserialize_pte(etc.to_edge(torch.export.export(Branch(), (torch.from_numpy(x),))).to_executorch().buffer)
    for instruction in pte.program.execution_plan[0].chains[0].instructions:
        if isinstance(instruction.instr_args, JumpFalseCall):
            instruction.instr_args.destination_instruction = 0  # back to the start, whatever the branch
    method = _load(serialize_pte(pte)).load_method("forward")
    for given in (x, -x):
        method.execute([given])


def _hostile_blob() -> bytes:
    data = _program("cpu")
    return _flip(data, data.index(b"ETCCPU\x00\x01") + 100)


def _unsupported_model():
    import torch

    import etc

    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs()

    etc.to_edge(torch.export.export(Spectrum(), (torch.randn(8),))).to_executorch()


def _cli_model_file(source: str):
    import os
    import tempfile

    from etc.tools.etc_main import load_model

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.py")
        with open(path, "w") as f:
            f.write(source)
        try:
            load_model(f"{path}:M", ["2x4"])
        except Exception as error:  # noqa: BLE001  (shown without the temporary folder)
            error.args = tuple(str(a).replace(folder + os.sep, "") for a in error.args)
            if hasattr(error, "message"):
                error.message = error.message.replace(folder + os.sep, "")
            raise


F32 = np.float32
CASES = [
    # ------------------------------------------------------------------ program bytes
    ("program bytes", "a file cut short", lambda: _load(_program("linear")[:200]), "ProgramError"),
    ("program bytes", "a weight's bit flipped (checksums on, the default)",
     lambda: _load(_flip(_program("linear"), _weight_position(_program("linear")))), "ProgramError"),
    ("program bytes", "the flatbuffer damaged", lambda: _load(_flip(_program("linear"), 100)), "ProgramError"),
    ("program bytes", "a delegate blob damaged", lambda: _load(_hostile_blob()), "ProgramError"),
    ("program bytes", "a delegate blob damaged, checksums off (Verification.Minimal)",
     lambda: _load(_hostile_blob(), verification=__import__("etc.runtime", fromlist=["Verification"])
                   .Verification.Minimal).load_method("forward"), "BackendError"),
    ("program bytes", "bytes appended to the file", lambda: _load(_program("linear") + b"\0" * 16), "ProgramError"),
    ("program bytes", "not a program at all", lambda: _load(b"\x7fELF" + bytes(60)), "ProgramError"),
    ("program bytes", "an instruction argument out of range (well-formed file)",
     lambda: _load(_out_of_range_index()), "ProgramError"),
    ("program bytes", "a path that does not exist", lambda: _load("no/such/model.pte"), "ProgramError"),
    ("program bytes", "a well-formed program whose loop cannot end", _endless_loop, "ExecutionError"),
    # ------------------------------------------------------------------ inputs
    ("inputs", "too few inputs", lambda: _execute("linear"), "InputError"),
    ("inputs", "the wrong dtype", lambda: _execute("linear", np.zeros((2, 4), np.float64)), "InputError"),
    ("inputs", "the wrong rank", lambda: _execute("linear", np.zeros((2, 4, 1), F32)), "InputError"),
    ("inputs", "the wrong static shape", lambda: _execute("linear", np.zeros((3, 4), F32)), "InputError"),
    ("inputs", "a dynamic dim above its Dim maximum",
     lambda: _execute("dynamic", np.zeros((9, 3), F32), np.zeros((9, 3), F32)), "InputError"),
    ("inputs", "a dynamic dim below its Dim minimum",
     lambda: _execute("dynamic", np.zeros((1, 3), F32), np.zeros((1, 3), F32)), "InputError"),
    ("inputs", "two inputs disagreeing on a shared Dim",
     lambda: _execute("dynamic", np.zeros((4, 3), F32), np.zeros((3, 3), F32)), "InputError"),
    ("inputs", "not a tensor", lambda: _execute("linear", "x"), "InputError"),
    # ------------------------------------------------------------------ options
    ("options", "verification given as a string",
     lambda: _load(_program("linear"), verification="Minimal"), "EtcError"),
    ("options", "a method the program does not have", lambda: _load(_program("linear")).load_method("fwd"),
     "ProgramError"),
    ("options", "a segment alignment that is not a power of two",
     lambda: __import__("etc.schema", fromlist=["serialize_pte"]).serialize_pte(
         __import__("etc.schema", fromlist=["deserialize_pte"]).deserialize_pte(_program("linear")),
         segment_alignment=48), "SerializationError"),
    # ------------------------------------------------------------------ models
    ("models", "an op etc cannot import (torch.fft.rfft: complex values)", _unsupported_model,
     "UnsupportedConstructError"),
    ("models", "a syntax error in the model file (etc compile)",
     lambda: _cli_model_file("import torch\nclass M(torch.nn.Module)\n    pass\n"), "UsageError"),
    ("models", "the model's constructor raising (etc compile)",
     lambda: _cli_model_file("class M:\n    def __init__(self):\n        raise ValueError('bad config')\n"),
     "UsageError"),
]


def normalize(message: str) -> str:
    message = message.splitlines()[0]
    message = re.sub(r"(?:/[\w.+-]+)+/([\w.+-]+\.py)", r"\1", message)  # a user file: its name, not our paths
    message = re.sub(r"\b[0-9a-f]{8}\b", "<hex>", message)
    message = re.sub(r"\d+", "N", message)
    return message.replace("|", "\\|")


def outcome(case) -> tuple[str, str]:
    """(error class name, normalized message) of running `case`; a non-EtcError propagates."""
    from etc.errors import EtcError

    _, _, action, _ = case
    try:
        action()
    except EtcError as error:
        return type(error).__name__, normalize(str(error))
    return "(no error)", ""


def render() -> str:
    lines = ["# What etc says about bad input", "",
             "Each class of bad input a user can give etc, and the error they get: every row is a case of",
             "`test/python/bad_inputs.py`, run by `test_bad_inputs.py` (which fails when this table is out of",
             "date: regenerate it with the command in that file). Numbers, offsets and checksums read `N`/`<hex>`.",
             "All errors derive from `etc.errors.EtcError`; none is a traceback from etc's internals or a crash.",
             ""]
    category = None
    for case in CASES:
        if case[0] != category:
            category = case[0]
            lines += ["", f"## {category[0].upper()}{category[1:]}", "", "| bad input | error | message |",
                      "|---|---|---|"]
        name, message = outcome(case)
        lines.append(f"| {case[1]} | `{name}` | {message} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
