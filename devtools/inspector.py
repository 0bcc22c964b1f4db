"""The Inspector: a run record joined with what the program is made of (ExecuTorch's Inspector).

    program = Runtime.get().load_program("model.pte", enable_etdump=True)
    method = program.load_method("forward")
    for _ in range(10):
        method.execute(inputs)
    inspector = Inspector(program.run_record, program="model.pte", etrecord=compile_record)
    inspector.print_data_tabular()          # one row per instruction: op, source line, times, calls
    inspector.top_ops(5)                    # where the time goes, by operator
    inspector.write_chrome_trace("t.json")  # open in https://ui.perfetto.dev
    inspector.to_dataframe()                # the same rows as a pandas DataFrame

Source lines come from the compile record when one is given (it also names the
edge and aten op, and lists the ops inside each delegate, shown as indented rows
under the delegate), else from the program's own stack traces (`Chain.stacktrace`).
A delegate's row times its whole call; a backend that times its own regions
(`execute_profiled`, see `etc.runtime.backends`) gets one timed row per region under
it, named by the ops it computed and their lines: a cpu delegate compiled with
`CpuPartitioner(profile=True)` times its dispatch regions (cycle counters in its code);
under any other delegate the rows list its ops, untimed.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

from etc.compiler.compile_record import CompileRecord
from etc.runtime.run_record import INPUTS_EVENT_INDEX, RunRecord
from etc.errors import EtcError

__all__ = ["Inspector", "EventRow"]


@dataclass
class EventRow:
    """One instruction over all recorded runs (or, `parent` set, one op inside a delegate, untimed)."""

    method: str
    chain: int
    instruction: int
    name: str  # the operator / delegate label the runtime used
    op: str | None  # the edge op (compile record) or the FX node (program stack trace)
    aten: str | None
    source: str | None  # the user's file:line
    calls: int = 0
    times_ns: list = field(default_factory=list)
    parent: int | None = None  # the delegate instruction this op is inside

    @property
    def total_ms(self) -> float:
        return sum(self.times_ns) / 1e6

    @property
    def mean_ms(self) -> float:
        return self.total_ms / len(self.times_ns) if self.times_ns else 0.0

    @property
    def min_ms(self) -> float:
        return min(self.times_ns) / 1e6 if self.times_ns else 0.0

    @property
    def max_ms(self) -> float:
        return max(self.times_ns) / 1e6 if self.times_ns else 0.0


def read_pte(program):
    from etc.schema import PteFile, deserialize_pte

    if program is None or isinstance(program, PteFile):
        return program
    if isinstance(program, (str, os.PathLike)):
        with open(program, "rb") as f:
            return deserialize_pte(f.read())
    if isinstance(program, (bytes, bytearray)):
        return deserialize_pte(bytes(program))
    pte = getattr(program, "pte", None)  # a runtime Program or an ExecutorchProgram
    if isinstance(pte, PteFile):
        return pte
    raise EtcError(f"Inspector: program must be a .pte path, its bytes or a PteFile, got {type(program).__name__}")


class Inspector:
    def __init__(self, run_record, *, etrecord=None, program=None, debug_buffer_path=None):
        if isinstance(run_record, (str, os.PathLike)):
            run_record = RunRecord.load(run_record, debug_buffer_path)
        if not isinstance(run_record, RunRecord):
            raise EtcError(f"Inspector: expected a RunRecord or its path, got {type(run_record).__name__}")
        if isinstance(etrecord, (str, os.PathLike)):
            etrecord = CompileRecord.load(etrecord)
        self.run_record = run_record
        self.etrecord = etrecord
        self.pte = read_pte(program)
        self.rows = self._build_rows()

    # ------------------------------------------------------------------ joining
    def _frame(self, method: str, chain: int, instruction: int):
        if self.pte is None or chain < 0:
            return None
        for plan in self.pte.program.execution_plan:
            if plan.name == method and chain < len(plan.chains):
                traces = plan.chains[chain].stacktrace or []
                if instruction < len(traces) and traces[instruction] is not None and traces[instruction].items:
                    return traces[instruction].items[-1]
        return None

    def _region_rows(self, parent: EventRow, events: list, record) -> list[EventRow]:
        """One timed row per region the backend reported inside a delegate call, named by its ops."""
        by_region: dict = {}
        for event in events:
            by_region.setdefault((event.name, event.ops), []).append(event.duration_ns)
        rows = []
        for (name, ops), times in by_region.items():
            inner = [record.ops[i] for i in ops if record is not None and 0 <= i < len(record.ops)]
            sources = list(dict.fromkeys(f"{op.file}:{op.line}" for op in inner if op.file))
            rows.append(EventRow(parent.method, parent.chain, parent.instruction, name,
                                 ", ".join(op.node or op.op for op in inner) or None,
                                 ", ".join(dict.fromkeys(op.aten for op in inner if op.aten)) or None,
                                 "; ".join(sources) or None, calls=len(times), times_ns=times,
                                 parent=parent.instruction))
        return rows

    def _build_rows(self) -> list[EventRow]:
        regions: dict = {}
        for event in self.run_record.delegate_events:
            regions.setdefault((event.method, event.chain, event.instruction), []).append(event)
        rows: dict = {}
        for event in self.run_record.events:
            if event.is_execute:
                continue
            key = (event.method, event.chain, event.instruction)
            row = rows.get(key)
            if row is None:
                row = rows[key] = self._row(event.method, event.chain, event.instruction, event.name)
            row.calls += 1
            row.times_ns.append(event.duration_ns)

        def order(key):  # per method: the input copy, the instructions in chain order, the output copy
            method, chain, instruction = key
            place = (1, chain, instruction) if chain >= 0 else ((0,) if instruction == INPUTS_EVENT_INDEX else (2,))
            return self.run_record.methods().index(method), place

        out = []
        for key in sorted(rows, key=order):
            row = rows[key]
            out.append(row)
            record = self.etrecord.instruction(*key) if self.etrecord is not None else None
            if key in regions:
                out.extend(self._region_rows(row, regions[key], record))
            elif record is not None and record.kind == "delegate":
                for op in record.ops:
                    out.append(EventRow(method=row.method, chain=row.chain, instruction=row.instruction,
                                        name=op.op, op=op.node, aten=op.aten,
                                        source=f"{op.file}:{op.line}" if op.file else None,
                                        parent=row.instruction))
        return out

    def _row(self, method: str, chain: int, instruction: int, name: str) -> EventRow:
        record = self.etrecord.instruction(method, chain, instruction) if self.etrecord is not None else None
        if record is not None:
            first = record.ops[0] if record.ops else None
            if record.kind == "delegate":
                op = f"{len(record.ops)} op(s)"
                aten = None
            else:
                op = first.op if first else None
                aten = first.aten if first else None
            source = next((f"{o.file}:{o.line}" for o in record.ops if o.file), None)
            return EventRow(method, chain, instruction, name, op, aten, source)
        frame = self._frame(method, chain, instruction)
        source = f"{frame.filename}:{frame.lineno}" if frame is not None else None
        return EventRow(method, chain, instruction, name, frame.name if frame is not None else None, None, source)

    # ------------------------------------------------------------------ summaries
    def execute_times_ns(self, method: str = "forward") -> list[int]:
        return [e.duration_ns for e in self.run_record.events if e.is_execute and e.method == method]

    def coverage(self, method: str = "forward") -> float:
        """Sum of the rows' times (instructions and the input/output copies) over the executes' times: how
        much of the latency the rows explain (the rest is the interpreter's own bookkeeping)."""
        executes = sum(self.execute_times_ns(method))
        instructions = sum(sum(r.times_ns) for r in self.rows if r.method == method and r.parent is None)
        return instructions / executes if executes else 0.0

    def top_ops(self, n: int = 10, method: str | None = None, regions: bool = False) -> list[tuple[str, float, int]]:
        """[(operator or delegate, total ms over all runs, calls)] by total time, largest first. `regions=True`:
        a delegate whose backend timed its regions is ranked by them instead (`"delegate 'cpu': conv2d"`), so a
        fully delegated model still says where its time goes."""
        broken_down = {(r.method, r.instruction) for r in self.rows if r.parent is not None and r.times_ns} \
            if regions else set()
        by_instruction = {(r.method, r.instruction): r.name for r in self.rows if r.parent is None}
        totals: dict = {}
        for row in self.rows:
            if method is not None and row.method != method:
                continue
            if row.parent is None:
                if (row.method, row.instruction) in broken_down:
                    continue
                name = row.name
            elif (row.method, row.parent) in broken_down and row.times_ns:
                name = f"{by_instruction[(row.method, row.parent)]}: {row.name}"
            else:
                continue
            ms, calls = totals.get(name, (0.0, 0))
            totals[name] = (ms + row.total_ms, calls + row.calls)
        ranked = sorted(totals.items(), key=lambda item: -item[1][0])
        return [(name, ms, calls) for name, (ms, calls) in ranked[:n]]

    # ------------------------------------------------------------------ output
    COLUMNS = ("method", "instruction", "name", "op", "aten", "source", "calls", "mean_ms", "min_ms", "max_ms",
               "total_ms")

    def _values(self, row: EventRow) -> list:
        timed = row.parent is None or bool(row.times_ns)  # delegate regions a backend timed
        instruction = row.instruction if row.chain >= 0 else None  # the input/output copies are no instruction
        return [row.method, instruction, ("  " if row.parent is not None else "") + row.name, row.op, row.aten,
                row.source, row.calls if timed else None, row.mean_ms if timed else None,
                row.min_ms if timed else None, row.max_ms if timed else None, row.total_ms if timed else None]

    def to_dataframe(self):
        """The rows as a pandas DataFrame (pandas is the optional `etc[devtools]` dependency)."""
        try:
            import pandas
        except ImportError:
            raise EtcError("Inspector.to_dataframe needs pandas: pip install 'etc[devtools]' "
                           "(print_data_tabular and top_ops work without it)") from None
        return pandas.DataFrame([self._values(r) for r in self.rows], columns=list(self.COLUMNS))

    def format_table(self, source_width: int = 40) -> str:
        def cell(value) -> str:
            if value is None:
                return ""
            if isinstance(value, float):
                return f"{value:.4f}"
            return str(value)

        def short(source):
            if source is None:
                return None
            text = source if len(source) <= source_width else "..." + source[-(source_width - 3):]
            return text

        columns = ("instruction", "name", "op", "source", "calls", "mean_ms", "total_ms")
        table = [[cell(v) for k, v in zip(self.COLUMNS, self._values(r)) if k in columns] for r in self.rows]
        for line in table:
            line[3] = cell(short(line[3] or None))
        widths = [max([len(h)] + [len(line[i]) for line in table]) for i, h in enumerate(columns)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(columns, widths))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in table]
        for method in self.run_record.methods():
            times = self.execute_times_ns(method)
            if times:
                mean = sum(times) / len(times) / 1e6
                lines.append(f"{method}: {len(times)} execute(s), mean {mean:.4f} ms; the rows account for "
                             f"{100 * self.coverage(method):.1f}% of it")
        return "\n".join(lines)

    def print_data_tabular(self, file=None) -> None:
        print(self.format_table(), file=file or sys.stdout)

    def chrome_trace(self) -> dict:
        """The events in Chrome's trace format: one process per method, executes and instructions as
        complete ("X") events in microseconds, each with its op and source line."""
        info = {(r.method, r.chain, r.instruction): r for r in self.rows if r.parent is None}
        methods = self.run_record.methods()
        origin = min((e.start_ns for e in self.run_record.events), default=0)
        trace = [{"ph": "M", "name": "process_name", "pid": i, "args": {"name": f"method {m}"}}
                 for i, m in enumerate(methods)]
        for event in self.run_record.events:
            args = {"run": event.run}
            row = info.get((event.method, event.chain, event.instruction))
            if row is not None:
                args.update(instruction=event.instruction, op=row.op, aten=row.aten, source=row.source)
            trace.append({"ph": "X", "name": event.name, "cat": "execute" if event.is_execute else "instruction",
                          "pid": methods.index(event.method), "tid": 0 if event.is_execute else 1,
                          "ts": (event.start_ns - origin) / 1e3, "dur": event.duration_ns / 1e3, "args": args})
        for event in self.run_record.delegate_events:
            row = info.get((event.method, event.chain, event.instruction))
            trace.append({"ph": "X", "name": event.name, "cat": "delegate region",
                          "pid": methods.index(event.method), "tid": 2, "ts": (event.start_ns - origin) / 1e3,
                          "dur": event.duration_ns / 1e3,
                          "args": {"run": event.run, "delegate": row.name if row else None, "ops": list(event.ops)}})
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path) -> None:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)
