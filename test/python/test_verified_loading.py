"""`Runtime.load_program(verification=...)`: checksums on by default, off with Verification.Minimal (issue 11).

The defect: 269 of 500 corrupted copies of a small program loaded and computed different outputs
without a word (damage in the constant segment). Now the default load refuses them, naming the
segment; `Verification.Minimal` is the explicit opt-out, and even then a cpu delegate's blob is
refused by its own CRC before any of its code runs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import etc
from etc.errors import BackendError, EtcError, ProgramError
from etc.runtime import Runtime, Verification
from etc.targets.cpu import CpuPartitioner


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.arange(12.0).reshape(3, 4) / 7)

    def forward(self, x):
        return x @ self.weight.T + 1.0


X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


def _program(delegated: bool) -> bytes:
    edge = etc.to_edge(torch.export.export(Affine(), (torch.from_numpy(X),)))
    return (edge.to_backend(CpuPartitioner()) if delegated else edge).to_executorch().buffer


def _flip_inside(data: bytes, needle: bytes, at: int | None = None) -> bytes:
    corrupted = bytearray(data)
    corrupted[data.index(needle) + (len(needle) // 2 if at is None else at)] ^= 0x08
    return bytes(corrupted)


def _run(data: bytes, verification=Verification.InternalConsistency):
    return Runtime.get().load_program(data, verification=verification).load_method("forward").execute([X])[0]


def test_a_damaged_weight_is_refused_by_default():
    data = _program(delegated=False)
    expected = _run(data)
    from etc.schema import deserialize_pte

    weight = max(deserialize_pte(data).constant_data, key=len)  # as stored (the compiler may transpose it)
    corrupted = _flip_inside(data, weight)
    with pytest.raises(ProgramError, match=r"Program\.segments\[0\] \(constant data\): checksum mismatch"):
        Runtime.get().load_program(corrupted)
    # Minimal trusts the bytes' values: the damage goes through (what the default protects from).
    assert not np.array_equal(_run(corrupted, Verification.Minimal), expected)


def test_a_damaged_blob_is_refused_even_with_minimal_verification():
    data = _program(delegated=True)
    np.testing.assert_allclose(_run(data), X @ (np.arange(12.0).reshape(3, 4) / 7).T + 1, rtol=1e-6)
    corrupted = _flip_inside(data, b"ETCCPU\x00\x01", at=100)  # in the blob's metadata
    with pytest.raises(ProgramError, match=r"blob of delegate 0 \('cpu'\) of method 'forward'\): checksum mismatch"):
        Runtime.get().load_program(corrupted)
    program = Runtime.get().load_program(corrupted, verification=Verification.Minimal)
    with pytest.raises(BackendError, match="cpu blob: checksum mismatch"):
        program.load_method("forward")


def test_verification_takes_the_enum():
    assert [v.name for v in Verification] == ["Minimal", "InternalConsistency"]
    with pytest.raises(EtcError, match="verification must be Verification.Minimal or"):
        Runtime.get().load_program(_program(delegated=False), verification="Minimal")


def test_a_loop_that_changes_nothing_is_an_error_not_a_hang():
    """Found by the fuzzer: a well-formed program whose jump goes back to its start re-ran the same
    iteration forever (the child had to be killed). The method is deterministic, so an iteration
    that leaves every value as it found it is reported instead."""
    from etc.errors import ExecutionError
    from etc.schema import JumpFalseCall, deserialize_pte, serialize_pte

    class Branch(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))

    x = np.ones(4, np.float32)
    pte = deserialize_pte(etc.to_edge(torch.export.export(Branch(), (torch.from_numpy(x),))).to_executorch().buffer)
    instructions = pte.program.execution_plan[0].chains[0].instructions
    position = next(i for i, ins in enumerate(instructions) if isinstance(ins.instr_args, JumpFalseCall))
    instructions[position].instr_args.destination_instruction = 0
    method = Runtime.get().load_program(serialize_pte(pte)).load_method("forward")
    outcomes = set()
    for given in (x, -x):
        try:
            method.execute([given])
            outcomes.add("ran")
        except ExecutionError as error:
            assert "a loop iteration changed no value" in str(error) and f"instruction {position}" in str(error)
            outcomes.add("refused")
    assert outcomes == {"ran", "refused"}  # one branch falls through, the other would loop forever


def test_a_planned_arena_too_large_to_allocate_is_an_execution_error():
    """Found by the fuzzer: numpy's MemoryError escaped the EtcError hierarchy."""
    from etc.errors import ExecutionError
    from etc.schema import deserialize_pte, serialize_pte

    pte = deserialize_pte(_program(delegated=False))
    pte.program.execution_plan[0].non_const_buffer_sizes[1] = 1 << 62
    with pytest.raises(ExecutionError, match=r"cannot allocate planned memory id 1 of 4611686018427387904 bytes"):
        Runtime.get().load_program(serialize_pte(pte)).load_method("forward")
