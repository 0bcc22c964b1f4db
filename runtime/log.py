"""Logging and the platform hooks (PAL) the runtime calls, replaceable by the embedding application.

ExecuTorch's runtime never talks to the platform directly: it logs through
`et_pal_emit_log_message`, reads time through `et_pal_current_ticks` and stops
through `et_pal_abort`, and a port overrides those three. The same three hooks
here, so an application embedding etc (a service, a test harness, a device
shell) can route runtime messages into its own logging, time profiles with its
own clock and decide what "abort" means:

    from etc.runtime import log
    log.set_log_level("debug")                   # or ETC_LOG_LEVEL=debug in the environment
    log.set_pal(log_sink=my_sink, clock=my_clock_ns, abort=my_abort)

- log levels: DEBUG < INFO < ERROR < FATAL (ExecuTorch's); messages below the
  level are dropped before they are formatted. The level starts at INFO, or at
  `ETC_LOG_LEVEL` when that is set when this module is first imported;
  `set_log_level` wins over both.
- `log_sink(record)`: receives every `LogRecord` at or above the level
  (default: one line on stderr).
- `clock() -> int`: nanoseconds from an arbitrary origin, monotonic; the run
  record (`enable_etdump=True`) and `Method.profile` time instructions with it
  (default: `time.perf_counter_ns`).
- `abort(message)`: called by `fatal()` after the message is logged. The default
  raises `FatalError` rather than killing the interpreter (a Python host can
  still catch it and report); an application that wants ExecuTorch's behaviour
  installs `lambda message: os.abort()`.

Errors the runtime raises are not also logged: in Python the exception carries
its message to the caller (ExecuTorch logs because a C++ error code carries
none). What is logged is what nobody would otherwise see: load details at DEBUG,
a built-in backend that failed to load at ERROR.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable

from etc.errors import EtcError

__all__ = ["LogLevel", "LogRecord", "Pal", "FatalError", "set_log_level", "get_log_level", "set_pal", "get_pal",
           "reset_pal", "log", "debug", "info", "error", "fatal", "now_ns", "LOG_LEVEL_ENV"]

LOG_LEVEL_ENV = "ETC_LOG_LEVEL"


class LogLevel(IntEnum):
    DEBUG = 0
    INFO = 1
    ERROR = 2
    FATAL = 3

    @property
    def letter(self) -> str:
        """The one-letter tag ExecuTorch prints (D, I, E, F)."""
        return self.name[0]


class FatalError(EtcError):
    """What the default abort hook raises: the runtime hit a condition it cannot continue from."""


@dataclass(frozen=True)
class LogRecord:
    """One message: when (the PAL clock, ns), how severe, from which part of etc, and the text."""

    timestamp_ns: int
    level: LogLevel
    source: str
    message: str

    def format(self) -> str:
        return f"{self.level.letter} {self.timestamp_ns / 1e9:.6f} {self.source}] {self.message}"


def _stderr_sink(record: LogRecord) -> None:
    print(record.format(), file=sys.stderr, flush=True)


def _raise_fatal(message: str) -> None:
    raise FatalError(message)


@dataclass(frozen=True)
class Pal:
    """The three platform hooks; replace any of them with `set_pal`."""

    log_sink: Callable[[LogRecord], None] = _stderr_sink
    clock: Callable[[], int] = time.perf_counter_ns
    abort: Callable[[str], None] = _raise_fatal


def parse_level(level) -> LogLevel:
    """A LogLevel from a LogLevel, its value, or its name in any case ("debug", "Error")."""
    if isinstance(level, LogLevel):
        return level
    if isinstance(level, int) and not isinstance(level, bool):
        try:
            return LogLevel(level)
        except ValueError:
            pass
    elif isinstance(level, str) and level.strip().upper() in LogLevel.__members__:
        return LogLevel[level.strip().upper()]
    names = ", ".join(name.lower() for name in LogLevel.__members__)
    raise EtcError(f"unknown log level {level!r} (levels: {names})")


def _initial_level() -> LogLevel:
    text = os.environ.get(LOG_LEVEL_ENV, "").strip()
    if not text:
        return LogLevel.INFO
    try:
        return parse_level(text)
    except EtcError as problem:
        raise EtcError(f"{LOG_LEVEL_ENV}: {problem.message}") from None


_level: LogLevel = _initial_level()
_pal: Pal = Pal()


def set_log_level(level) -> LogLevel:
    """Set the lowest level that reaches the sink; returns the previous level."""
    global _level
    previous, _level = _level, parse_level(level)
    return previous


def get_log_level() -> LogLevel:
    return _level


def set_pal(*, log_sink: Callable | None = None, clock: Callable | None = None,
            abort: Callable | None = None) -> Pal:
    """Replace the given hooks (the others stay); returns the previous Pal, for `set_pal(**vars(old))`-style
    restoring or `reset_pal()`."""
    global _pal
    for name, hook in (("log_sink", log_sink), ("clock", clock), ("abort", abort)):
        if hook is not None and not callable(hook):
            raise EtcError(f"set_pal: {name} must be callable, got {type(hook).__name__}")
    previous = _pal
    _pal = Pal(log_sink=log_sink or previous.log_sink, clock=clock or previous.clock,
               abort=abort or previous.abort)
    return previous


def get_pal() -> Pal:
    return _pal


def reset_pal(pal: Pal | None = None) -> None:
    """Back to `pal` (a value `set_pal` returned), or to the defaults."""
    global _pal
    _pal = pal if pal is not None else Pal()


def now_ns() -> int:
    """The PAL clock: what every time the runtime records is read from."""
    return _pal.clock()


def log(level, message: str, *, source: str = "etc.runtime") -> None:
    level = parse_level(level)
    if level < _level:
        return
    _pal.log_sink(LogRecord(timestamp_ns=_pal.clock(), level=level, source=source, message=message))


def debug(message: str, *, source: str = "etc.runtime") -> None:
    if _level <= LogLevel.DEBUG:
        log(LogLevel.DEBUG, message, source=source)


def info(message: str, *, source: str = "etc.runtime") -> None:
    log(LogLevel.INFO, message, source=source)


def error(message: str, *, source: str = "etc.runtime") -> None:
    log(LogLevel.ERROR, message, source=source)


def fatal(message: str, *, source: str = "etc.runtime") -> None:
    """Log `message` at FATAL (whatever the level) and call the abort hook, which must not return."""
    _pal.log_sink(LogRecord(timestamp_ns=_pal.clock(), level=LogLevel.FATAL, source=source, message=message))
    _pal.abort(message)
    raise FatalError(f"the abort hook returned after: {message}")
