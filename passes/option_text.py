"""Reading option text the way MLIR's pass options are written: quoted strings and `{...}`
values nest, so a separator inside them does not end a value. Both readers of option text use
this one scanner: the pipeline parser (where a pass's `{...}` block ends) and the option parser
(where one `key=value` ends)."""

from __future__ import annotations


def scan_value(text: str, start: int, stops: str) -> tuple[int, str | None, int]:
    """Scan `text` from `start` to the first character of `stops` outside quotes and braces.

    Returns (its index, or len(text) when there is none; the quote still open there or None; the
    brace depth there). A closing brace in `stops` ends the scan only where it closes nothing
    opened after `start`, so `scan_value("a={1,2}} b", 0, "}")` stops at index 7.
    """
    depth, quote = 0, None
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif depth == 0 and ch in stops:
            break
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        i += 1
    return i, quote, depth
