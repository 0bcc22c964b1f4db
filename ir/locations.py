"""Source locations: from FX node metadata to MLIR locations, and back to text.

Every diagnostic etc prints should point at the line of the user's model that
produced the construct at fault, not at torch internals. torch.export records,
for each FX node, the Python stack at the moment the op was traced
(`node.meta["stack_trace"]`, outermost frame first). The frame that matters is
the innermost one in the user's code: `F.linear` inside `nn.Linear.forward` is
torch's line, the `x = layer(x)` that called it is the user's.

The MLIR form is fixed by ARCHITECTURE.md: `loc("<node name>"("<file>":<line>:<col>))`,
a NameLoc (the FX node name, which is also what `ep.graph` prints) around a
FileLineColLoc. `format_location` renders any location back as `file:line:col`
for `EtcError.location`.
"""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass

from torch_mlir import ir

# A frame line of a Python traceback: `  File "/path/x.py", line 12, in forward`.
_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', re.MULTILINE)


def _library_roots() -> tuple[str, ...]:
    """Directories whose frames are never "the user's code": torch itself and
    the Python standard library (tracing machinery lives in both)."""
    import torch

    roots = [os.path.dirname(torch.__file__), os.path.dirname(os.__file__)]
    return tuple(os.path.normpath(root) + os.sep for root in roots)


_LIBRARY_ROOTS: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SourcePosition:
    """A position in a user's source file (1-based line and column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


def _is_library_frame(path: str) -> bool:
    global _LIBRARY_ROOTS
    if _LIBRARY_ROOTS is None:
        _LIBRARY_ROOTS = _library_roots()
    if path.startswith("<"):  # <eval_with_key>, <string>: generated code
        return True
    if not os.path.isabs(path):  # torch records some of its own frames relative: torch/fx/...
        return path.split("/", 1)[0] in ("torch", "torchgen")
    return os.path.normpath(path).startswith(_LIBRARY_ROOTS)


def _first_code_column(path: str, line: int) -> int:
    """1-based column of the first non-blank character of `path:line`, so that
    an editor jumps to the statement rather than to its indentation. The stack
    trace carries no column; 1 when the file cannot be read."""
    text = linecache.getline(path, line)
    stripped = text.lstrip()
    return len(text) - len(stripped) + 1 if stripped else 1


def user_source_position(stack_trace: str | None) -> SourcePosition | None:
    """The innermost frame of `stack_trace` that is in the user's code.

    None when there is no trace (placeholders) or when every frame is
    torch's own (nodes torch.export adds itself, such as the `sym_size` of a
    runtime assertion): pointing the user at torch's sources would mislead.
    """
    if not stack_trace:
        return None
    frames = [(m["file"], int(m["line"])) for m in _FRAME_RE.finditer(stack_trace)]
    if not frames:
        return None
    user_frames = [frame for frame in frames if not _is_library_frame(frame[0])]
    if not user_frames:
        return None
    file, line = user_frames[-1]
    return SourcePosition(file, line, _first_code_column(file, line))


def node_source_position(node) -> SourcePosition | None:
    """The user's source position of an FX node; for a node torch.export
    created itself (no user frame), that of its first user that has one, so
    that a `sym_size` points at the line that needed the size."""
    position = user_source_position(node.meta.get("stack_trace"))
    if position is None and node.op == "call_function":
        for user in node.users:
            position = user_source_position(user.meta.get("stack_trace"))
            if position is not None:
                break
    return position


def node_location(node, context: ir.Context | None = None) -> ir.Location:
    """`loc("<node.name>"("<file>":<line>:<col>))` for an FX node, or a bare
    NameLoc when neither the node nor its users have a user stack frame."""
    return named_location(node.name, node_source_position(node), context)


def named_location(name: str, position: SourcePosition | None = None,
                   context: ir.Context | None = None) -> ir.Location:
    if position is None:
        return ir.Location.name(name, context=context)
    file_loc = ir.Location.file(position.file, position.line, position.col, context=context)
    return ir.Location.name(name, childLoc=file_loc, context=context)


def source_position(location: ir.Location) -> SourcePosition | None:
    """The first file position found inside `location` (through names, call
    sites, i.e. the callee, and fused locations), or None (unknown location)."""
    if isinstance(location, ir.FileLineColLoc):
        return SourcePosition(location.filename, location.start_line, location.start_col)
    if isinstance(location, ir.NameLoc):
        return source_position(location.child_loc)
    if isinstance(location, ir.CallSiteLoc):
        return source_position(location.callee) or source_position(location.caller)
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            found = source_position(inner)
            if found is not None:
                return found
    return None


def location_name(location: ir.Location) -> str | None:
    """The name of the outermost NameLoc in `location` (the FX node name for
    imported ops), or None."""
    if isinstance(location, ir.NameLoc):
        return location.name_str
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            name = location_name(inner)
            if name is not None:
                return name
    return None


# A location's printed form: its first file position, and the name of a NameLoc.
_FILE_POSITION_RE = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_NAME_RE = re.compile(r'^loc\("((?:[^"\\]|\\.)*)"')


def format_location(location) -> str | None:
    """The one location -> text of etc (errors, diagnostics, the cpu target's decisions):
    `file:line:col` of the first file position inside an MLIR location (through names, call sites,
    the callee first, and fusions), `'name'` for a NameLoc without one, None for an unknown location
    (or None). It reads the printed form, so it takes the locations diagnostics hand out, which the
    bindings do not downcast, as well as typed ones."""
    if location is None:
        return None
    text = str(location)
    match = _FILE_POSITION_RE.search(text)
    if match:
        return f"{match.group(1)}:{match.group(2)}:{match.group(3)}"
    match = _NAME_RE.match(text)
    if match:
        return f"'{match.group(1)}'"
    return None


