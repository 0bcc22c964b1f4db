"""The run record: what a program did when it ran (ExecuTorch's ETDump, in etc's format).

The runtime fills one when a program is loaded with `enable_etdump=True`:

- one event per executed instruction (its method, chain, instruction index, the
  operator or delegate it ran, start and end on the PAL clock), an instruction in
  a loop once per iteration;
- per execute, `Method::set_inputs` and `Method::get_outputs` (copying the inputs in,
  the outputs out) and one `Method::execute` around all of it: the latency a caller
  measures, which the other events add up to;
- the regions inside a delegate call, for backends that time them (`execute_profiled`,
  see `etc.runtime.backends`), each with the partition ops it computed;
- with `debug_buffer_size` > 0, the output tensors of every instruction, copied
  after it ran, until that many bytes are kept (as ExecuTorch's debug buffer;
  `dropped_outputs` counts what no longer fit, so a reader knows the capture is
  partial instead of silently missing it).

Recording appends a tuple per instruction; everything else (Event objects, the
files) is made when read. Files: `save(etdump_path, debug_buffer_path)` writes
the events as JSON and the intermediate outputs as one `.npz`; `RunRecord.load`
reads both back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from etc.errors import EtcError

__all__ = ["Event", "DelegateEvent", "DelegateEvents", "RunRecord", "EXECUTE_EVENT", "FORMAT"]

FORMAT = "etc-run-record"
FORMAT_VERSION = 1
# The event spanning a whole execute (ExecuTorch's name for it), and those of its input and output
# copies (chain -1, instruction -2 and -3), so that the rows add up to the latency a caller measures.
EXECUTE_EVENT = "Method::execute"
INPUTS_EVENT = "Method::set_inputs"
OUTPUTS_EVENT = "Method::get_outputs"
INPUTS_EVENT_INDEX, OUTPUTS_EVENT_INDEX = -2, -3


@dataclass(frozen=True)
class Event:
    """One timed span: an instruction (chain, instruction >= 0), the copies of an execute's inputs and
    outputs (chain -1, instruction -2 / -3) or the whole execute (chain and instruction -1)."""

    name: str
    method: str
    run: int  # which execute of `method`, from 0
    chain: int
    instruction: int
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def is_execute(self) -> bool:
        return self.name == EXECUTE_EVENT


@dataclass(frozen=True)
class DelegateEvent:
    """One region inside a delegate call, as its backend reported it: placed in time one after the
    other from the call's start (backends measure durations, e.g. with cycle counters)."""

    name: str
    method: str
    run: int
    chain: int
    instruction: int  # the delegate call's
    start_ns: int
    end_ns: int
    ops: tuple = ()  # indices into the delegate's ops in the compile record

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class DelegateEvents:
    """What a backend's `execute_profiled(handle, args, events)` fills: the regions of one call, in order."""

    def __init__(self):
        self._entries: list = []  # (name, ns, ops) or a deferred report

    def add(self, name: str, duration_ns: int, ops=()) -> None:
        """A region `name` that took `duration_ns`, computing the partition's ops `ops` (their indices in
        the order the partition lists them, as the compile record does)."""
        self._entries.append((str(name), int(duration_ns), tuple(map(int, ops))))

    def add_later(self, report) -> None:
        """Regions to be made after the call: `report()` returns [(name, duration_ns, ops)] and runs once the
        runtime has taken the call's end time (`regions` is first read), so a backend that must convert
        what it measured (counter ticks to ns, names) does that outside the time it reports. `report` must
        not depend on anything the next call changes (copy the measurements first)."""
        self._entries.append(report)

    @property
    def regions(self) -> list:
        """[(name, duration_ns, ops)] in the order they were added, deferred reports made now."""
        if any(callable(entry) for entry in self._entries):
            entries, self._entries = self._entries, []
            for entry in entries:
                if callable(entry):
                    for name, duration_ns, ops in entry():
                        self.add(name, duration_ns, ops)
                else:
                    self._entries.append(entry)
        return self._entries


class RunRecord:
    """Events and (optionally) intermediate outputs of the executes of one loaded program."""

    def __init__(self, debug_buffer_size: int = 0):
        if debug_buffer_size < 0:
            raise EtcError(f"debug_buffer_size must be >= 0, got {debug_buffer_size}")
        self.debug_buffer_size = int(debug_buffer_size)
        self._events: list[tuple] = []
        self._delegate_events: list[tuple] = []
        self._runs: dict[str, int] = {}
        # (method, run, chain, instruction) -> [(value index, array)]
        self.intermediates: dict[tuple, list] = {}
        self.debug_bytes = 0
        self.dropped_outputs = 0

    # ------------------------------------------------------------------ recording (the runtime's side)
    @property
    def captures_outputs(self) -> bool:
        return self.debug_buffer_size > 0

    def begin_run(self, method: str) -> int:
        run = self._runs.get(method, 0)
        self._runs[method] = run + 1
        return run

    def add(self, name: str, method: str, run: int, chain: int, instruction: int, start_ns: int,
            end_ns: int) -> None:
        self._events.append((name, method, run, chain, instruction, start_ns, end_ns))

    def add_delegate_events(self, method: str, run: int, chain: int, instruction: int, start_ns: int,
                            events: DelegateEvents) -> None:
        at = start_ns
        for name, duration, ops in events.regions:
            self._delegate_events.append((name, method, run, chain, instruction, at, at + duration, ops))
            at += duration

    def keep_outputs(self, method: str, run: int, chain: int, instruction: int, outputs) -> None:
        """Copy `outputs` ([(value index, array)]) of one instruction, within the debug buffer's budget.
        An instruction inside a loop keeps its last iteration's outputs (the earlier ones are freed)."""
        key = (method, run, chain, instruction)
        for _, earlier in self.intermediates.pop(key, []):
            self.debug_bytes -= earlier.nbytes
        kept = []
        for index, array in outputs:
            if self.debug_bytes + array.nbytes > self.debug_buffer_size:
                self.dropped_outputs += 1
                continue
            self.debug_bytes += array.nbytes
            kept.append((index, np.array(array, copy=True)))
        if kept:
            self.intermediates[key] = kept

    def clear(self) -> None:
        """Forget everything recorded so far (a warm-up run, say); run numbers restart at 0."""
        self._events.clear()
        self._delegate_events.clear()
        self._runs.clear()
        self.intermediates.clear()
        self.debug_bytes = 0
        self.dropped_outputs = 0

    # ------------------------------------------------------------------ reading
    @property
    def events(self) -> list[Event]:
        return [Event(*e) for e in self._events]

    @property
    def delegate_events(self) -> list[DelegateEvent]:
        return [DelegateEvent(*e) for e in self._delegate_events]

    def runs(self, method: str) -> int:
        return self._runs.get(method, 0)

    def methods(self) -> list[str]:
        return list(self._runs)

    def __repr__(self) -> str:
        runs = ", ".join(f"{m} x{n}" for m, n in self._runs.items()) or "nothing"
        return f"RunRecord({runs}, {len(self._events)} events, {len(self.intermediates)} captured outputs)"

    # ------------------------------------------------------------------ files
    def save(self, etdump_path, debug_buffer_path=None) -> None:
        if self.intermediates and debug_buffer_path is None:
            raise EtcError("the record holds intermediate outputs: give a debug_buffer_path to write them to")
        document = {"format": FORMAT, "version": FORMAT_VERSION, "debug_buffer_size": self.debug_buffer_size,
                    "dropped_outputs": self.dropped_outputs, "runs": self._runs,
                    "events": [list(e) for e in self._events],
                    "delegate_events": [[*e[:7], list(e[7])] for e in self._delegate_events]}
        with open(etdump_path, "w") as f:
            json.dump(document, f)
        if debug_buffer_path is not None:
            arrays = {f"{m}|{r}|{c}|{i}|{v}": array for (m, r, c, i), kept in self.intermediates.items()
                      for v, array in kept}
            with open(debug_buffer_path, "wb") as f:
                np.savez(f, **arrays)

    @classmethod
    def load(cls, etdump_path, debug_buffer_path=None) -> "RunRecord":
        try:
            with open(etdump_path) as f:
                document = json.load(f)
        except OSError as error:
            raise EtcError(f"cannot read run record '{os.fspath(etdump_path)}': {error.strerror}") from None
        except ValueError:
            raise EtcError(f"'{os.fspath(etdump_path)}' is not an etc run record (not JSON; ExecuTorch's own "
                           "ETDump files are not read)") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise EtcError(f"'{os.fspath(etdump_path)}' is not an etc run record")
        if document.get("version") != FORMAT_VERSION:
            raise EtcError(f"run record '{os.fspath(etdump_path)}' has version {document.get('version')}, "
                           f"this etc reads version {FORMAT_VERSION}")
        record = cls(debug_buffer_size=int(document["debug_buffer_size"]))
        record._events = [tuple(e) for e in document["events"]]
        record._delegate_events = [(*e[:7], tuple(e[7])) for e in document.get("delegate_events", [])]
        record._runs = {str(k): int(v) for k, v in document["runs"].items()}
        record.dropped_outputs = int(document["dropped_outputs"])
        if debug_buffer_path is not None:
            with np.load(debug_buffer_path) as arrays:
                for key in arrays.files:
                    method, run, chain, instruction, value = key.rsplit("|", 4)
                    array = arrays[key]
                    record.intermediates.setdefault((method, int(run), int(chain), int(instruction)), []).append(
                        (int(value), array))
                    record.debug_bytes += array.nbytes
        return record
