"""The stack a native library's entries use on 32-bit Arm, bounded from LLVM's own frame descriptions
(`.save`/`.vsave`/`.pad` directives) over the call graph of the emitted assembly."""

from __future__ import annotations

import re

from etc.errors import LoweringError
from etc.targets.cpu.isa import CpuTarget
from etc.targets.cpu.library_ir import target_machine

_DIRECTIVE = re.compile(r"^\s*\.(save|vsave|pad)\s+(.*)$")
_CALL = re.compile(r"^\s*(?:bl|blx|b|b\.w)\s+([A-Za-z_.$][\w.$]*)\s*$")
_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):")


def stack_bound(assembly: str, entries: list) -> dict:
    """The most stack each entry can use, from the assembly LLVM writes for 32-bit Arm: each function's
    frame as its EHABI unwind directives state it (`.save {r4, lr}`: 4 bytes a register, `.vsave
    {d8, d9}`: 8 a d-register, `.pad #N`), plus the deepest callee over the call graph (`bl`, and `b`
    to a function: a tail call). Functions outside the module (libm, memcpy) are listed, not counted.
    {"entries": {symbol: bytes}, "frames": {function: bytes}, "external": [names]}."""
    frames, calls, current = {}, {}, None
    functions = set()
    for line in assembly.splitlines():
        label = _LABEL.match(line)
        if label and not label.group(1).startswith(".L"):
            current = label.group(1)
            functions.add(current)
            frames.setdefault(current, 0)
            calls.setdefault(current, set())
            continue
        if current is None:
            continue
        directive = _DIRECTIVE.match(line)
        if directive:
            kind, operand = directive.groups()
            if kind == "pad":
                frames[current] += int(operand.strip().lstrip("#"), 0)
            else:
                registers = _register_list(operand)
                frames[current] += sum(8 if r.startswith("d") else 4 for r in registers)
            continue
        call = _CALL.match(line)
        if call and not call.group(1).startswith(".L"):
            calls[current].add(call.group(1))
    external = sorted({c for cs in calls.values() for c in cs if c not in functions})
    depth: dict = {}

    def deepest(fn, path=()):
        if fn not in functions:
            return 0
        if fn in path:
            raise LoweringError(f"stack bound: {fn} is recursive")
        if fn not in depth:
            depth[fn] = frames[fn] + max((deepest(c, path + (fn,)) for c in calls[fn]), default=0)
        return depth[fn]

    return {"entries": {e: deepest(e) for e in entries}, "frames": frames, "external": external}


def _register_list(text: str) -> list:
    """"{r4, r5, lr}" / "{d8-d11}" -> the registers."""
    out = []
    for item in text.strip().strip("{}").split(","):
        item = item.strip()
        if "-" in item:
            first, last = item.split("-")
            prefix = first.rstrip("0123456789")
            for n in range(int(first[len(prefix):]), int(last.strip()[len(prefix):]) + 1):
                out.append(f"{prefix}{n}")
        elif item:
            out.append(item)
    return out


def stack_report(module, target: CpuTarget, entries: list) -> dict:
    """stack_bound over the assembly of the same code (with unwind directives: the object has none)."""
    import llvmlite.binding as llvm

    copy = llvm.parse_bitcode(module.as_bitcode())
    return stack_bound(target_machine(target).emit_assembly(copy), entries)
