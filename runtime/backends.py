"""Delegate backends: the registry a program's `BackendDelegate.id` is looked up in.

A backend is any object with

- `backend_id: str`, the id a `.pte` names (`BackendDelegate.id`);
- `is_available() -> bool`, whether it can run on this machine at all;
- `init(blob: bytes, compile_specs: list[CompileSpec]) -> handle`, called once per
  delegate when a method is loaded (parse or link the processed blob here, not per call);
  `compile_specs` are the delegate's `etc.schema.CompileSpec`s (`key`, `value` bytes);
- `execute(handle, args: list) -> list | None`, called for every DelegateCall. `args`
  are the call's values resolved as kernels see them (numpy arrays for tensors,
  Python values otherwise), inputs then outputs. Output arrays view the method's
  planned memory (at their full, upper-bound shape) and are written in place. A
  backend returns its outputs (those views, or views of the same storage re-shaped
  for a dynamic shape); the runtime takes the returned arrays as the new values of
  the trailing arguments. Returning None means "written in place, full shape";
- optionally `destroy(handle)`;
- optionally `execute_profiled(handle, args, events)`: `execute` that also reports the regions of
  the call (`events.add(name, duration_ns, ops=(i, ...))`, `ops` indexing the partition's ops in
  order), called instead of `execute` only while the program records (`enable_etdump=True`), so a
  backend times its regions (cycle counters around native dispatch regions, say) at no cost
  otherwise. The run record places them one after the other from the call's start; the
  Inspector shows them under the delegate's row with their ops' source lines.

`Backend` is a convenience base class; subclassing it is not required. Built-in
backends (`cpu`, the MLIR->LLVM target) register themselves the first time a
program names them, so users never import a target package just to run a `.pte`.
"""

from __future__ import annotations

import importlib

from etc.errors import BackendError

__all__ = ["Backend", "register_backend", "unregister_backend", "get_backend", "registered_backends",
           "is_available", "compile_specs_dict"]

# Backends shipped with etc: id -> module whose register() adds it to this registry.
BUILTIN_BACKENDS = {"cpu": "etc.targets.cpu.runtime"}

_registry: dict[str, object] = {}
REPORTED_LOAD_FAILURES: set[str] = set()  # built-ins whose load failure was logged (once each)


class Backend:
    """Base class for runtime backends; override `init` and `execute`."""

    backend_id: str = ""

    def is_available(self) -> bool:
        return True

    def init(self, blob: bytes, compile_specs: list):
        raise NotImplementedError(f"backend '{self.backend_id}' does not implement init()")

    def execute(self, handle, args: list):
        raise NotImplementedError(f"backend '{self.backend_id}' does not implement execute()")

    def destroy(self, handle) -> None:
        """Release what `init` created (nothing by default)."""


def register_backend(backend) -> None:
    """Add (or replace) `backend` under its `backend_id`."""
    backend_id = getattr(backend, "backend_id", None)
    if not isinstance(backend_id, str) or not backend_id:
        raise BackendError(f"cannot register {type(backend).__name__}: it has no backend_id string")
    missing = [m for m in ("is_available", "init", "execute") if not callable(getattr(backend, m, None))]
    if missing:
        raise BackendError(f"cannot register backend '{backend_id}': it has no {', '.join(missing)} method")
    _registry[backend_id] = backend


def unregister_backend(backend_id: str) -> None:
    """Remove a backend (a no-op if it is not registered)."""
    _registry.pop(backend_id, None)


def _load_builtin(backend_id: str) -> None:
    module_name = BUILTIN_BACKENDS.get(backend_id)
    if module_name is None or backend_id in _registry:
        return
    try:
        importlib.import_module(module_name).register()
    except Exception as error:  # noqa: BLE001 - a built-in that cannot load is reported as unregistered
        from etc.runtime import log

        if backend_id in REPORTED_LOAD_FAILURES:
            return
        REPORTED_LOAD_FAILURES.add(backend_id)
        log.error(f"built-in backend '{backend_id}' failed to load ({module_name}): "
                  f"{type(error).__name__}: {error}")


def registered_backends() -> list[str]:
    """Ids of the registered backends (the built-ins included, if they load)."""
    for backend_id in BUILTIN_BACKENDS:
        _load_builtin(backend_id)
    return sorted(_registry)


def is_available(backend_id: str) -> bool:
    """Whether `backend_id` is registered and says it can run here."""
    _load_builtin(backend_id)
    backend = _registry.get(backend_id)
    if backend is None:
        return False
    try:
        return bool(backend.is_available())
    except Exception:  # noqa: BLE001 - a failing probe means "not available"
        return False


def get_backend(backend_id: str, *, method: str | None = None):
    """The backend registered as `backend_id` if it is available; BackendError naming it otherwise."""
    _load_builtin(backend_id)
    backend = _registry.get(backend_id)
    if backend is None:
        known = ", ".join(registered_backends()) or "none"
        raise BackendError(f"the program delegates to backend '{backend_id}', which is not registered "
                           f"(registered backends: {known})", method=method,
                           notes=["register it with etc.runtime.register_backend() before load_method()"])
    try:
        available = bool(backend.is_available())
    except Exception as error:  # noqa: BLE001
        raise BackendError(f"backend '{backend_id}' failed its availability check: "
                           f"{type(error).__name__}: {error}", method=method) from error
    if not available:
        raise BackendError(f"backend '{backend_id}' is registered but not available on this machine",
                           method=method)
    return backend


def compile_specs_dict(specs) -> dict:
    """A delegate's CompileSpec list as {key: value}, values decoded as UTF-8 text where they are."""
    out = {}
    for spec in specs or []:
        value = bytes(spec.value or b"")
        try:
            out[spec.key] = value.decode("utf-8")
        except UnicodeDecodeError:
            out[spec.key] = value
    return out
