"""The registry of etc's Python passes: name -> `Pass` subclass.

`@register_pass` adds a class; `get_pass(name)` and `all_passes()` first import
every module of the packages in `PASS_PACKAGES` (`etc.passes`, and each target's
`passes` package, such as `etc.targets.cpu.passes`) except `INFRASTRUCTURE_MODULES`,
so that looking a pass up never depends on what happened to be imported before.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil

from etc.errors import PassError

# Modules of etc.passes that define no pass. Every other module of the package is
# imported on the first lookup, so a new pass only needs `@register_pass` in its own file.
INFRASTRUCTURE_MODULES = frozenset({"pass_api", "registry", "pipeline", "memory_planning_algorithms",
                                    "constant_table"})

# Packages whose every module may register passes: the target-independent ones, then each
# target's back end (its pipeline is made of these, so etc-opt can run any prefix of it).
PASS_PACKAGES = ("etc.passes", "etc.targets.cpu.passes")

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
    _PASSES[name] = cls
    return cls


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for package_name in PASS_PACKAGES:
            package = importlib.import_module(package_name)
            for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
                if not info.name.startswith("_") and info.name not in INFRASTRUCTURE_MODULES:
                    importlib.import_module(f"{package_name}.{info.name}")


def all_passes() -> dict[str, type]:
    """Every registered pass, by name (sorted)."""
    _load_builtin()
    return dict(sorted(_PASSES.items()))


def lookup_pass(name: str) -> type | None:
    """The pass registered as `name`, or None."""
    _load_builtin()
    return _PASSES.get(name)


def close_names(name: str, candidates) -> list[str]:
    return difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)


def get_pass(name: str) -> type:
    """The pass registered as `name`; PassError naming close names if there is none."""
    cls = lookup_pass(name)
    if cls is None:
        close = close_names(name, _PASSES)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else \
            f"; registered passes: {', '.join(sorted(_PASSES))}"
        raise PassError(f"unknown pass '{name}'{hint}")
    return cls
