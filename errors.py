"""The one exception hierarchy of etc.

Every error a user can cause derives from `EtcError`. Each carries, where it
applies, the MLIR location (and so the user's source line) of the construct at
fault, so that tools print an MLIR-style diagnostic instead of a traceback.
"""

from __future__ import annotations


class EtcError(Exception):
    """Base of every error etc raises on purpose.

    `location` is a human-readable location string (an MLIR location, usually a
    user's `file:line`), or None when the error has no place in a program.
    """

    def __init__(self, message: str, *, location: str | None = None, notes: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.location = location
        self.notes = list(notes or [])

    def __str__(self) -> str:
        text = f"{self.location}: error: {self.message}" if self.location else self.message
        for note in self.notes:
            text += f"\nnote: {note}"
        return text


class UnsupportedConstructError(EtcError):
    """A construct of the exported program that etc cannot import or lower."""


class VerificationError(EtcError):
    """IR that fails verification (malformed op, unsupported dtype, ...)."""


class PassError(EtcError):
    """A pass failed, or a pass pipeline / pass option is invalid."""


class InternalError(PassError):
    """A bug in etc, not in the user's program: a pass raised something it never meant to.
    Names the pass; the original exception is chained as `__cause__` for the bug report."""


class UserPassError(PassError):
    """A pass from outside etc (a user's `@register_pass` class, an `etc-opt --load-pass-plugin`
    module) raised an exception: names the pass and the line of the user's file it came from.
    The original exception is chained as `__cause__`."""


class LoweringError(EtcError):
    """An op that has no lowering on the chosen path (no edge form, no kernel, ...)."""


class MemoryPlanningError(EtcError):
    """Memory planning could not place a value (bad mem_id, custom algorithm error, ...)."""


class SerializationError(EtcError):
    """A program could not be serialized."""


class ProgramError(EtcError):
    """A program file that is truncated, corrupted, or otherwise invalid."""


class ExecutionError(EtcError):
    """An error while loading or executing a method.

    Carries the method, the instruction index, the operator and the value index
    involved, whichever apply.
    """

    def __init__(self, message: str, *, method: str | None = None, instruction: int | None = None,
                 operator: str | None = None, value: int | None = None, **kwargs):
        details = []
        if method is not None:
            details.append(f"method '{method}'")
        if instruction is not None:
            details.append(f"instruction {instruction}")
        if operator is not None:
            details.append(f"operator {operator}")
        if value is not None:
            details.append(f"value {value}")
        if details:
            message = f"{message} [{', '.join(details)}]"
        super().__init__(message, **kwargs)
        self.method = method
        self.instruction = instruction
        self.operator = operator
        self.value = value



class InputError(ExecutionError):
    """Inputs given to `Method.execute` do not match the method's signature."""


class KernelNotFoundError(ExecutionError):
    """A program names an operator with no registered kernel."""


class BackendError(ExecutionError):
    """A delegate's backend is missing, unavailable, or refused its blob."""
