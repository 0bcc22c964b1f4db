"""The registry of etc's Python passes: name -> `Pass` subclass.

`@register_pass` adds a class. The packages in `PASS_PACKAGES` (`etc.passes`, and
each target's `passes` package, such as `etc.targets.cpu.passes`) are indexed by
reading their sources (`pass_names()`: name -> module), so `get_pass(name)` imports
just the module that defines the pass (a one-pass etc-opt run does not import every
pass and what they need), and `all_passes()` imports every module of them except
`INFRASTRUCTURE_MODULES`. Either way, looking a pass up never depends on what happened
to be imported before; a test keeps the index equal to what the modules register.

`load_pass_plugin(path_or_module)` imports a user's module (a `.py` file or a dotted
module name) whose `@register_pass` classes then join the registry: `etc-opt
--load-pass-plugin=my_passes.py` lists and runs them like etc's own. A pass defined
outside etc is a user pass (`is_user_pass`): an exception it raises is the user's
(`UserPassError` at the user's file and line), not a bug in etc.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import pkgutil
import re
import sys
import traceback

from etc.errors import PassError, UserPassError

# Modules of etc.passes that define no pass. Every other module of the package is
# imported on the first lookup, so a new pass only needs `@register_pass` in its own file.
INFRASTRUCTURE_MODULES = frozenset({"pass_api", "registry", "pipeline", "memory_planning_algorithms",
                                    "constant_table"})

# Packages whose every module may register passes: the target-independent ones, then each
# target's back end (its pipeline is made of these, so etc-opt can run any prefix of it).
PASS_PACKAGES = ("etc.passes", "etc.targets.cpu.passes")

_ETC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PASSES: dict[str, type] = {}
_loaded = False


def register_pass(cls: type) -> type:
    """Class decorator: register a `Pass` subclass under `cls.name` (which must be new)."""
    name = getattr(cls, "name", "")
    if not name or not isinstance(name, str):
        raise TypeError(f"{cls.__name__}: a pass needs a `name`")
    if not getattr(cls, "summary", ""):
        raise TypeError(f"{cls.__name__}: pass {name} needs a one-line `summary`")
    existing = _PASSES.get(name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise PassError(f"pass '{name}' is registered twice ({existing.__module__}.{existing.__qualname__} "
                        f"and {cls.__module__}.{cls.__qualname__})")
    builtin = builtin_index().get(name)
    if existing is None and builtin is not None and builtin != cls.__module__:  # etc's own, not imported yet
        raise PassError(f"pass '{name}' is registered twice ({builtin} and {cls.__module__}.{cls.__qualname__})")
    _PASSES[name] = cls
    return cls


# How a pass module names its passes: `name = "etc-..."` in a `@register_pass` class (or the
# module's `PASS_NAME = "etc-..."` that the class's name is), or `@function_pass("etc-...", ...)`.
_NAME_IN_SOURCE = re.compile(r'^(?:\s+name|PASS_NAME) = "([a-z0-9-]+)"|@function_pass\(\s*"([a-z0-9-]+)"', re.M)
_index: dict[str, str] | None = None


def _pass_modules():
    """(module name, source path) of every module of PASS_PACKAGES that may define passes, found
    on disk: importing a target's package (its partitioner and all) is not needed to list them."""
    for package_name in PASS_PACKAGES:
        folder = os.path.join(_ETC_ROOT, *package_name.split(".")[1:])
        for file_name in sorted(os.listdir(folder)):
            stem, ext = os.path.splitext(file_name)
            if ext == ".py" and not stem.startswith("_") and stem not in INFRASTRUCTURE_MODULES:
                yield f"{package_name}.{stem}", os.path.join(folder, file_name)


def builtin_index() -> dict[str, str]:
    """etc's pass name -> the module defining it, read from the sources without importing them."""
    global _index
    if _index is None:
        _index = {}
        for module, path in _pass_modules():
            with open(path, encoding="utf-8") as f:
                for match in _NAME_IN_SOURCE.finditer(f.read()):
                    _index[match.group(1) or match.group(2)] = module
    return _index


def pass_names() -> list[str]:
    """Every pass name, etc's and the loaded plugins', sorted, without importing etc's passes."""
    return sorted(set(builtin_index()) | set(_PASSES))


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module, _ in _pass_modules():
            importlib.import_module(module)


def all_passes() -> dict[str, type]:
    """Every registered pass, by name (sorted)."""
    _load_builtin()
    return dict(sorted(_PASSES.items()))


def lookup_pass(name: str) -> type | None:
    """The pass registered as `name`, or None; imports only the module the index names."""
    if name not in _PASSES:
        module = builtin_index().get(name)
        if module is None:
            return None
        importlib.import_module(module)
        if name not in _PASSES:
            raise PassError(f"pass '{name}': {module} names it but registers no pass of that name")
    return _PASSES[name]


def close_names(name: str, candidates) -> list[str]:
    return difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)


def get_pass(name: str) -> type:
    """The pass registered as `name`; PassError naming close names if there is none."""
    cls = lookup_pass(name)
    if cls is None:
        close = close_names(name, pass_names())
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else \
            f"; registered passes: {', '.join(pass_names())}"
        raise PassError(f"unknown pass '{name}'{hint}")
    return cls


_PLUGINS: dict[str, object] = {}  # resolved path or module name -> module


def load_pass_plugin(spec: str):
    """Import a pass plugin once: `spec` is a `.py` file path or a dotted module name. Its
    `@register_pass` / `@function_pass` definitions register as it is imported. Returns the
    module; a missing file or module, or an exception while importing it, is a PassError
    (the latter at the plugin's failing line)."""
    _load_builtin()  # so that a plugin reusing a built-in name is caught as a duplicate
    is_file = spec.endswith(".py") or os.sep in spec or (os.altsep and os.altsep in spec)
    key = os.path.realpath(spec) if is_file else spec
    if key in _PLUGINS:
        return _PLUGINS[key]
    if is_file:
        if not os.path.isfile(key):
            raise PassError(f"pass plugin '{spec}': no such file")
        name = "etc_pass_plugin_" + "".join(c if c.isalnum() else "_" for c in key)
        module_spec = importlib.util.spec_from_file_location(name, key)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except PassError:
            del sys.modules[name]
            raise
        except Exception as exc:
            del sys.modules[name]
            raise _plugin_import_error(spec, exc) from exc
    else:
        try:
            module = importlib.import_module(spec)
        except ModuleNotFoundError as exc:
            if exc.name and spec.startswith(exc.name):
                raise PassError(f"pass plugin '{spec}': no module named '{exc.name}' (give a dotted module "
                                "name importable from sys.path, or a path to a .py file)") from None
            raise _plugin_import_error(spec, exc) from exc
        except PassError:
            raise
        except Exception as exc:
            raise _plugin_import_error(spec, exc) from exc
    _PLUGINS[key] = module
    return module


def _plugin_import_error(spec: str, exc: BaseException) -> PassError:
    frame = user_frame(exc)
    where = f"{frame.filename}:{frame.lineno}" if frame else None
    return PassError(f"pass plugin '{spec}' failed to import: {type(exc).__name__}: {exc}", location=where)


def _is_etc_file(path: str) -> bool:
    """A source file of etc itself (the package, not its tests)."""
    path = os.path.realpath(path)
    return path.startswith(_ETC_ROOT + os.sep) and not path.startswith(os.path.join(_ETC_ROOT, "test") + os.sep)


def is_user_pass(cls: type) -> bool:
    """Whether `cls` is defined outside etc's package (a user's pass or a plugin's)."""
    if cls.__module__ != "etc" and not cls.__module__.startswith("etc."):
        return True
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return path is not None and not _is_etc_file(path)


def user_frame(exc: BaseException):
    """The innermost traceback frame of `exc` in a file outside etc and outside installed
    packages (the user's code), or None."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith("<") or _is_etc_file(frame.filename) or \
                "site-packages" in os.path.realpath(frame.filename):
            continue
        found = frame
    return found


def user_pass_error(pass_name: str, exc: BaseException, location: str | None) -> UserPassError:
    """The UserPassError for an exception `exc` raised inside the user's pass `pass_name`."""
    frame = user_frame(exc)
    where = f"{frame.filename}:{frame.lineno}" if frame else location
    notes = [f"in `{frame.line}`"] if frame and frame.line else []
    if location and location != where:
        notes.append(f"while running on the op at {location}")
    return UserPassError(f"pass '{pass_name}' raised {type(exc).__name__}: {exc}", location=where, notes=notes)
