"""The runtime's backend registry: where delegates come to run.

A backend registers by id (the `id` of a program's `BackendDelegate`) and has:

- `is_available() -> bool`: can it run on this machine at all;
- `init(blob, compile_specs) -> handle`: once per `load_method`, from the
  delegate's processed bytes (e.g. link object code);
- `execute(handle, args) -> list`: per call. `args` are the DelegateCall's
  values in order, inputs then outputs; tensors are numpy arrays, outputs are
  views into the planned arena that the backend writes in place. It returns
  the output arrays (the same views, or views of the same storage re-shaped
  for a dynamic shape).
- `destroy(handle)` (optional): when the method goes away.

Built-in backends (`cpu`) register themselves the first time they are looked
up, so a user loading a program never has to import a target package.
"""

from __future__ import annotations

import importlib

from etc.errors import BackendError

__all__ = ["Backend", "register_backend", "get_backend", "registered_backends"]

# Backend id -> the module whose `register()` adds it.
BUILTIN_BACKENDS = {"cpu": "etc.targets.cpu.runtime"}

_BACKENDS: dict = {}


class Backend:
    """Base class of runtime backends (subclassing is optional: the methods are the contract)."""

    backend_id: str = ""

    def is_available(self) -> bool:
        return True

    def init(self, blob: bytes, compile_specs: dict):
        raise NotImplementedError

    def execute(self, handle, args: list) -> list:
        raise NotImplementedError

    def destroy(self, handle) -> None:
        pass


def register_backend(backend) -> None:
    backend_id = getattr(backend, "backend_id", "")
    if not backend_id:
        raise BackendError(f"{type(backend).__name__} has no backend_id")
    for name in ("is_available", "init", "execute"):
        if not callable(getattr(backend, name, None)):
            raise BackendError(f"backend '{backend_id}' has no {name}() method")
    _BACKENDS[backend_id] = backend


def registered_backends() -> list[str]:
    return sorted(set(_BACKENDS) | set(BUILTIN_BACKENDS))


def get_backend(backend_id: str):
    """The registered, available backend `backend_id`; BackendError otherwise."""
    if backend_id not in _BACKENDS and backend_id in BUILTIN_BACKENDS:
        module = importlib.import_module(BUILTIN_BACKENDS[backend_id])
        module.register()
    backend = _BACKENDS.get(backend_id)
    if backend is None:
        raise BackendError(f"the program delegates to backend '{backend_id}', which is not registered "
                           f"(registered: {', '.join(registered_backends()) or 'none'}); register it with "
                           "etc.runtime.register_backend before loading the method")
    try:
        available = backend.is_available()
    except Exception as error:  # noqa: BLE001 - a probing failure means "not available", said clearly
        raise BackendError(f"backend '{backend_id}' failed its availability check: {error}") from error
    if not available:
        raise BackendError(f"backend '{backend_id}' is registered but not available on this machine")
    return backend


def compile_specs_dict(specs) -> dict:
    """A delegate's CompileSpec list -> {key: str value}."""
    out = {}
    for spec in specs or []:
        value = spec.value
        if isinstance(value, (list, tuple)):
            value = bytes(value)
        out[spec.key] = value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value
    return out
