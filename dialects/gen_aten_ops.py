"""Generate `aten_ops.json`, the op table of the `aten` and `edge` dialects, from torch's schemas.

    python -m etc.dialects.gen_aten_ops            # rewrites dialects/aten_ops.json
    python -m etc.dialects.gen_aten_ops --check    # exit 1 if it is out of date

One entry per functional ATen overload (no out variants, no in-place or
mutating overloads: the IR is in value semantics) whose arguments we can
encode and whose results are tensors. That is every op of the Core ATen opset
(`core: true`, the edge dialect) plus the non-core ops that exported models
contain before decomposition. The table is committed so that loading the
dialects never depends on walking torch's registry (and so that a torch
upgrade shows up as a diff); a test checks it matches the installed torch.

Argument encoding (ARCHITECTURE.md, "Dialects"): `Tensor` -> operand,
`Tensor?` -> optional operand, `Tensor[]` -> variadic operand, `Tensor?[]` ->
variadic operand of the present entries plus a `<name>_mask` bool array;
everything else is an attribute. Arguments that may be symbolic (`SymInt`,
`SymInt[]`, `Scalar`) get a variadic `index` operand group `<name>_dynamic`
holding the symbolic values, in order, for the entries set to the dynamic
sentinel in the attribute.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from etc.errors import UnsupportedConstructError
from etc.ir.schema_types import spelled

TABLE_PATH = Path(__file__).with_name("aten_ops.json")



def op_mlir_name(name: str, overload: str) -> str:
    """`add`, `Tensor` -> `add_tensor`; the default overload keeps the bare name.

    MLIR op names are lower case without leading or double underscores, so
    ATen's private ops (`_softmax`) take a `p_` prefix (`p_softmax`) and runs
    of underscores collapse (`__and__.Tensor` -> `p_and_tensor`).
    """
    text = (name if not overload else f"{name}_{overload}").lower()
    private = text.startswith("_")
    text = re.sub("_+", "_", text).strip("_")
    return "p_" + text if private else text


def argument_entry(argument, field_name) -> dict | None:
    """The table entry of one schema argument (its encoding, by its row of the schema-type table), or
    None when the argument cannot be encoded (an unknown type, an optional tensor list, a required
    Generator): the op is then left out of the table."""
    type_text = str(argument.type)
    try:
        spelling = spelled(type_text)
    except UnsupportedConstructError:
        return None
    kind = spelling.type.kind
    entry = {"name": argument.name, "field": field_name(argument.name), "type": type_text}
    if argument.default is not None:
        entry["default"] = argument.default
    if kind == "tensor":
        entry["kind"] = "optional_operand" if spelling.optional else "operand"
    elif kind in ("tensor_list", "optional_tensor_list"):
        if spelling.optional:
            return None
        entry["kind"] = "variadic_operand" if kind == "tensor_list" else "optional_list_operand"
        if kind == "optional_tensor_list":
            entry["mask"] = field_name(argument.name, "_mask")
    else:
        if kind == "generator" and not spelling.optional:
            return None
        entry["kind"] = "attribute"
        if spelling.symbolic:  # values that may be symbolic sizes at import time
            entry["dynamic"] = field_name(argument.name, "_dynamic")
    return entry


def parse_schema(schema):
    """torch._C.FunctionSchema -> torchgen FunctionSchema (typed as in native_functions.yaml:
    `ScalarType?`, `SymInt[]`, `Scalar`), or None for schemas torchgen cannot read (varargs)."""
    from torchgen.model import FunctionSchema

    # torchgen splits arguments on ", ": list defaults must not contain it.
    text = re.sub(r"\[([^\]]*)\]", lambda m: "[" + m.group(1).replace(" ", "") + "]", str(schema))
    try:
        return FunctionSchema.parse(text.split("::", 1)[1])
    except Exception:  # noqa: BLE001 - not an ATen operator we import
        return None


def generate() -> dict:
    import torch
    from torchgen.model import SchemaKind

    from etc.dialects.irdl_base import field_name

    ops = []
    seen: dict[str, str] = {}
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        parsed = parse_schema(schema)
        if parsed is None:
            continue
        if parsed.kind() != SchemaKind.functional or parsed.name.name.inplace:
            continue
        if any(a.annotation is not None and a.annotation.is_write for a in parsed.arguments.flat_all):
            continue
        returns = []
        for index, ret in enumerate(parsed.returns):
            ret_type = str(ret.type)
            if ret_type == "Tensor":
                kind = "result"
            elif ret_type == "Tensor[]":
                kind = "variadic_result"
            else:
                returns = None
                break
            name = ret.name or ("result" if len(parsed.returns) == 1 else f"result{index}")
            returns.append({"field": field_name(name), "type": ret_type, "kind": kind})
        if not returns:
            continue
        arguments = [argument_entry(a, field_name) for a in parsed.arguments.flat_all]
        if any(a is None for a in arguments):
            continue
        fields = [a["field"] for a in arguments] + [a[k] for a in arguments for k in ("dynamic", "mask") if k in a]
        fields += [r["field"] for r in returns]
        if len(set(fields)) != len(fields):
            continue
        base_name = str(parsed.name.name)
        overload = parsed.name.overload_name
        torch_name = f"aten::{base_name}" + (f".{overload}" if overload else "")
        mlir_name = op_mlir_name(base_name, overload)
        if mlir_name in seen:  # `foo.Bar` and `foo_bar` would collide: number the later one
            mlir_name += f"_{sum(1 for n in seen if n.startswith(mlir_name))}"
        seen[mlir_name] = torch_name
        packet = getattr(torch.ops.aten, base_name, None)
        overload_obj = getattr(packet, overload or "default", None) if packet is not None else None
        core = bool(overload_obj is not None and torch.Tag.core in overload_obj.tags)
        ops.append({"name": mlir_name, "torch_name": torch_name, "core": core,
                    "arguments": arguments, "returns": returns})
    ops.sort(key=lambda op: op["name"])
    return {"generated_by": "python -m etc.dialects.gen_aten_ops", "torch_version": torch.__version__.split("+")[0],
            "ops": ops}


def render(table: dict) -> str:
    """One op per line: diffs after a torch upgrade stay readable."""
    lines = [f"{{\"generated_by\": {json.dumps(table['generated_by'])}, \"torch_version\": {json.dumps(table['torch_version'])},",
             ' "ops": [']
    lines += [" " + json.dumps(op, separators=(",", ":")) + ("," if i + 1 < len(table["ops"]) else "")
              for i, op in enumerate(table["ops"])]
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed table is out of date")
    parser.add_argument("-o", "--output", type=Path, default=TABLE_PATH)
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date; run: python -m etc.dialects.gen_aten_ops", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(json.loads(text)['ops'])} ops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
