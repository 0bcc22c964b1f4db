"""Corrupted programs: every load either succeeds or raises ProgramError; never another exception.

Two levels. The reader, in process (a few seconds, seeded): truncation at every
byte (raw, and with the header patched to claim the truncated size so the
flatbuffer decoder itself meets the cut), random bit flips, random 32-bit
overwrites with hostile values, and every index-bearing field of the sample
programs set out of range (which must be rejected, not just survived); samples
without checksums too, so the damage reaches the decoder. A corrupted file that
still loads must be re-serializable to a fixed point.

The whole runtime, in child processes (`program_fuzzer.py`): thousands of
structured mutants of etc-compiled programs (portable, cpu-delegated,
multi-method, dynamic-shape, stateful) and of a stock ExecuTorch file, each
loaded and run: 0 crashes, 0 hangs, 0 errors outside EtcError, and every mutant
of an etc program either raises ProgramError or computes the original outputs
bit for bit. `make fuzz` runs the same harness with many more cases.
"""

from __future__ import annotations

import dataclasses
import os
import random
import struct

import pytest

from pte_samples import add_constant_program, every_feature_program
from etc import schema as S
from etc.errors import ProgramError, SerializationError

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "data", "executorch_linear_relu.pte")


def without_extended_header(data: bytes) -> bytes:
    """The same flatbuffer with the optional eh00 header cut out (valid only without segments)."""
    size = struct.unpack_from("<I", data, 12)[0]
    assert size == 32 and struct.unpack_from("<Q", data, 24)[0] == 0, "program has segments"
    root = struct.unpack_from("<I", data, 0)[0] - size
    return struct.pack("<I", root) + data[4:8] + data[8 + size:]


def legacy_program() -> S.PteFile:
    """add_constant_program with its constant inline (deprecated constant_buffer): no segments at all."""
    pte = add_constant_program()
    pte.program.constant_buffer = [S.Buffer(storage=b""), S.Buffer(storage=pte.constant_data[0])]
    pte.constant_data = []
    pte.checksums = False  # a headerless file cannot delimit a trailer
    return pte


def unchecked(pte: S.PteFile) -> S.PteFile:
    """`pte` without etc's checksum trailer: corruption reaches the structural decoder itself."""
    pte.checksums = False
    return pte


def samples() -> dict[str, bytes]:
    return {
        "no_header": without_extended_header(S.serialize_pte(legacy_program())),
        "add_constant": S.serialize_pte(add_constant_program()),
        "add_constant_unchecked": S.serialize_pte(unchecked(add_constant_program())),
        "every_feature": S.serialize_pte(every_feature_program(), segment_alignment=16),
        "every_feature_unchecked": S.serialize_pte(unchecked(every_feature_program()), segment_alignment=16),
        "executorch": open(FIXTURE, "rb").read(),
    }


def data_end(data: bytes) -> int:
    """Where ExecuTorch's layout ends (etc's checksum trailer, if any, follows)."""
    if data[8:12] != b"eh00":
        return len(data)
    program_size, base, size = struct.unpack_from("<QQQ", data, 16)
    return base + size if base else program_size


SAMPLES = samples()


def load_or_reject(data: bytes) -> S.PteFile | None:
    """Loads `data`; a ProgramError is a fine answer, anything else fails the test."""
    try:
        pte = S.deserialize_pte(data)
    except ProgramError as error:
        assert str(error), "a ProgramError must say what is wrong"
        return None
    # What loads must be a program we can write again, and reading that back is a fixed point.
    again = S.serialize_pte(pte)
    assert S.serialize_pte(S.deserialize_pte(again)) == again
    return pte


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_truncation_at_every_byte(name):
    data = SAMPLES[name]
    has_header = data[8:12] == b"eh00"
    program_size = struct.unpack_from("<Q", data, 16)[0] if has_header else len(data)
    for length in range(len(data)):
        if length == data_end(data) and length < len(data):
            # Cut exactly before the checksum trailer: every byte of the program is still there.
            assert S.deserialize_pte(data[:length]).checksums is False
            continue
        with pytest.raises(ProgramError):
            S.deserialize_pte(data[:length])
        # Claim the truncated size in the header so the cut lands inside the flatbuffer decoding.
        patched = bytearray(data[:length])
        if has_header and length >= 40:
            struct.pack_into("<QQQ", patched, 16, min(program_size, length), 0, 0)
        load_or_reject(bytes(patched))


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_random_bit_flips(name):
    data = SAMPLES[name]
    rng = random.Random(f"bit-flips/{name}")
    outcomes = {"loaded": 0, "rejected": 0}
    for _ in range(1500):
        corrupted = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 4))):
            position = rng.randrange(len(data))
            corrupted[position] ^= 1 << rng.randrange(8)
        outcomes["loaded" if load_or_reject(bytes(corrupted)) else "rejected"] += 1
    # Both outcomes occur: flips in payload bytes are harmless, flips in offsets are caught.
    assert outcomes["loaded"] and outcomes["rejected"], outcomes


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_random_word_overwrites(name):
    data = SAMPLES[name]
    rng = random.Random(f"words/{name}")
    hostile = (0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, len(data), len(data) - 4, 0xFFFF)
    for _ in range(1000):
        corrupted = bytearray(data)
        position = rng.randrange(0, len(data) - 3)
        struct.pack_into("<I", corrupted, position, rng.choice(hostile))
        load_or_reject(bytes(corrupted))


# ------------------------------------------------------------ out-of-range indices
def index_sites(pte: S.PteFile):
    """(description, setter) for every index-bearing field of `pte`, each setting an out-of-range value."""
    sites = []

    def field(obj, name, bad, where):
        sites.append((f"{where}.{name}", lambda: setattr(obj, name, bad)))

    def item(items, i, bad, where):
        sites.append((f"{where}[{i}]", lambda: items.__setitem__(i, bad)))

    for p, plan in enumerate(pte.program.execution_plan):
        where = f"plan[{p}]"
        n_values = len(plan.values or [])
        for name in ("inputs", "outputs"):
            for i in range(len(getattr(plan, name))):
                item(getattr(plan, name), i, n_values, f"{where}.{name}")
        for v, value in enumerate(plan.values or []):
            val, at = value.val, f"{where}.values[{v}]"
            if isinstance(val, (S.TensorList, S.IntList, S.OptionalTensorList)):
                for i in range(len(val.items)):
                    item(val.items, i, n_values + 3, f"{at}.items")
            if isinstance(val, S.Tensor):
                if val.data_buffer_idx:
                    field(val, "data_buffer_idx", 1000, at)
                if val.allocation_info is not None:
                    field(val.allocation_info, "memory_id", len(plan.non_const_buffer_sizes), at)
                    field(val.allocation_info, "memory_id", 0, at)
        for d, delegate in enumerate(plan.delegates or []):
            field(delegate.processed, "index", 77, f"{where}.delegates[{d}].processed")
        for c, chain in enumerate(plan.chains):
            for name in ("inputs", "outputs"):
                for i in range(len(getattr(chain, name) or [])):
                    item(getattr(chain, name), i, -2, f"{where}.chains[{c}].{name}")
            for k, instruction in enumerate(chain.instructions):
                call, at = instruction.instr_args, f"{where}.chains[{c}].instructions[{k}]"
                for f in dataclasses.fields(call):
                    if f.name == "args":
                        for i in range(len(call.args)):
                            item(call.args, i, n_values, f"{at}.args")
                    elif f.name == "destination_instruction":
                        field(call, f.name, len(chain.instructions) + 1, at)
                    else:  # op_index, delegate_index, move_from/to, cond_value_index, value_index
                        field(call, f.name, -1, at)
    return sites


def sample_programs():
    return {"add_constant": add_constant_program, "every_feature": every_feature_program,
            "executorch": lambda: S.deserialize_pte(SAMPLES["executorch"])}


def test_headerless_sample_is_a_valid_program():
    assert S.deserialize_pte(SAMPLES["no_header"]) == legacy_program()


@pytest.mark.parametrize("name", sorted(sample_programs()))
def test_every_out_of_range_index_is_rejected(name):
    make = sample_programs()[name]
    count = len(index_sites(make()))
    assert count >= 5
    for i in range(count):
        pte = make()
        where, corrupt = index_sites(pte)[i]
        corrupt()
        try:
            data = S.serialize_pte(pte)
        except SerializationError:
            continue  # refused even earlier: a SEGMENT delegate index is checked when it is mapped to a segment
        with pytest.raises(ProgramError):
            S.deserialize_pte(data)
            pytest.fail(f"{where} out of range was accepted")


# ------------------------------------------------------------ the runtime, in child processes
import program_fuzzer  # noqa: E402  (test/python is on sys.path under pytest)

CI_CASES = 9000  # >= 1000 mutants per program kind (9 samples)


@pytest.fixture(scope="module")
def fuzz_samples():
    return program_fuzzer.build_samples()


def test_mutated_programs_never_crash_hang_or_compute_silently_wrong(fuzz_samples):
    cases = program_fuzzer.default_cases(fuzz_samples, CI_CASES)
    report = program_fuzzer.fuzz(fuzz_samples, cases, seed="ci")
    print(report.summary())
    failures = report.failures(fuzz_samples)
    assert not failures, "\n".join(f"{f.name} {f.mode} [{f.status}] {f.what}: {f.detail}" for f in failures[:20])
    assert len(report.outcomes) >= CI_CASES * 0.9
    seen = {(o.name, o.mode, o.status) for o in report.outcomes}
    for name, mode in cases:
        assert (name, mode, "error") in seen, f"no mutant of {name} ({mode}) was refused: the mutations are too mild"
    # Checksums at work: raw damage to an etc program is refused naming the segment it hit.
    details = {o.detail for o in report.outcomes if o.mode == "raw" and o.name == "cpu"}
    assert any("constant data" in d or "blob of delegate" in d for d in details), details
    # With them off, a damaged blob is still refused (by its own CRC) before any of its code runs.
    assert any("cpu blob: checksum mismatch" in o.detail for o in report.outcomes if o.mode == "minimal")


@pytest.mark.parametrize("mode, status", [("selftest-crash", "crash"), ("selftest-hang", "hang")])
def test_the_harness_sees_crashes_and_hangs(mode, status, monkeypatch):
    sample = program_fuzzer.Sample(S.serialize_pte(add_constant_program()), [])
    samples = {"add": sample}

    class Fixed:
        def __init__(self, *args):
            pass

        def case(self, _mode):
            return "self test", sample.data

    monkeypatch.setattr(program_fuzzer, "Mutator", Fixed)
    report = program_fuzzer.fuzz(samples, {("add", mode): 1}, timeout=3 if mode == "selftest-hang" else 60)
    assert [o.status for o in report.outcomes] == [status]
    assert report.failures(samples)
