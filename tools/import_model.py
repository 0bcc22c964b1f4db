"""Export a model with torch.export, import it, print the aten-dialect module.

    python -m etc.tools.import_model mlp                        # a model of the test zoo
    python -m etc.tools.import_model path/to/models.py:make_cnn # a file and a name in it
    python -m etc.tools.import_model my.package:Net --dynamic-batch 1:32

The name after `:` is a `torch.nn.Module` subclass (built with no arguments,
its example inputs from an `example_inputs` attribute or method, its
`dynamic_shapes` likewise if present) or a function returning one of: such a
module, `(module, example_inputs[, dynamic_shapes])`, an object with an
`export()` method (the zoo's `ZooModel`), an ExportedProgram, or a dict method
name -> ExportedProgram.

It exists for lit tests (`// RUN: %PYTHON -m etc.tools.import_model ... |
filecheck %s`) and for looking at what the importer makes of a model. The module is
the exported graph as imported; `--decompose` first applies `to_edge`'s Core ATen
decompositions, so `etc-opt` can run the edge pipeline on it. Errors
print as `file:line:col: error: ...` on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import warnings

from etc.errors import EtcError

def _load_attribute(spec: str):
    """`file.py:name`, `pkg.module:name`, or a zoo model name."""
    if ":" not in spec:
        from etc.models.zoo import ZOO

        if spec not in ZOO:
            raise EtcError(f"unknown model '{spec}': not in the model zoo (etc.models.zoo) ({', '.join(ZOO)}); "
                           "use file.py:name or package.module:name")
        return ZOO[spec]
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py"):
        if not os.path.exists(where):
            raise EtcError(f"no such file: {where}")
        module_name = os.path.splitext(os.path.basename(where))[0]
        loader_spec = importlib.util.spec_from_file_location(module_name, where)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    if not hasattr(module, name):
        raise EtcError(f"{where} has no attribute '{name}'")
    return getattr(module, name)


def _member(obj, name):
    value = getattr(obj, name, None)
    return value() if callable(value) else value


def _export_module(module, example_inputs, dynamic_shapes):
    import torch

    if example_inputs is None:
        raise EtcError(f"{type(module).__name__} gives no example inputs (an `example_inputs` attribute or method)")
    module.eval()
    return {"forward": torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)}


def exported_programs(target, dynamic_batch: tuple[int, int] | None = None) -> dict:
    """Turn whatever `target` is (see the module docstring) into {method: ExportedProgram}."""
    import torch

    if isinstance(target, type) and issubclass(target, torch.nn.Module):
        target = target()
    elif callable(target) and not isinstance(target, torch.nn.Module):
        target = target()
    if isinstance(target, torch.export.ExportedProgram):
        return {"forward": target}
    if isinstance(target, dict):
        return target
    if isinstance(target, tuple):
        module, inputs, *rest = target
        dynamic = rest[0] if rest else None
    elif isinstance(target, torch.nn.Module):
        module, inputs, dynamic = target, _member(target, "example_inputs"), _member(target, "dynamic_shapes")
    elif hasattr(target, "export"):
        if dynamic_batch is None:
            return target.export()
        module, inputs, dynamic = target.module, target.example_inputs, None
    else:
        raise EtcError(f"cannot export a {type(target).__name__}")
    if dynamic_batch is not None:
        batch = torch.export.Dim("batch", min=dynamic_batch[0], max=dynamic_batch[1])
        dynamic = tuple({0: batch} if isinstance(x, torch.Tensor) else None for x in inputs)
    return _export_module(module, inputs, dynamic)


def _parse_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition(":")
    return int(low), int(high)


def _constant_table(program_ir) -> str:
    lines = []
    for name, array in program_ir.constants.items():
        shape = "x".join(str(size) for size in array.shape) or "scalar"
        lines.append(f"// constant {name}: {program_ir.constant_dtypes[name]} {shape} {array.nbytes} bytes")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etc.tools.import_model", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="zoo model name, file.py:name or package.module:name")
    parser.add_argument("--no-debug-info", action="store_true", help="print without locations")
    parser.add_argument("--dynamic-batch", type=_parse_range, metavar="MIN:MAX",
                        help="export dim 0 of every tensor input as a dynamic dim with this range")
    parser.add_argument("--constants", action="store_true", help="also list the constant table")
    parser.add_argument("--decompose", action="store_true",
                        help="decompose to Core ATen first, as etc.to_edge does (its output takes the edge pipeline)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from etc.compiler.importer import import_program

        programs = exported_programs(_load_attribute(args.model), args.dynamic_batch)
        if args.decompose:
            from etc.compiler.program import EdgeCompileConfig, decompose

            programs = decompose(programs, EdgeCompileConfig())
        program_ir = import_program(programs)
    except EtcError as error:
        print(error if error.location else f"error: {error}", file=sys.stderr)
        return 1
    print(program_ir.to_text(debug_info=not args.no_debug_info))
    if args.constants:
        print(_constant_table(program_ir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
