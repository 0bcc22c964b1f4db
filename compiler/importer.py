"""Import a `torch.export.ExportedProgram` into an MLIR module in the `aten` dialect.

    program_ir = etc.import_program(exported_program)     # or {"forward": ep, "encode": ep2}
    print(program_ir)                                      # the module, with locations

What the module looks like is fixed by ARCHITECTURE.md ("IR in MLIR"): one
public `func.func` per method whose arguments are the user inputs; parameters,
buffers and lifted constants as `ml_program.global`s named by their
fully-qualified name, with their bytes in `ProgramIR.constants` rather than
in the IR; written buffers as mutable globals with a `global_store`; dynamic
dims as `?` with their `torch.export.Dim` ranges in `etc.dim_bounds`; and on
every op the FX node name around the user's `file:line:col`.

Why FX straight to MLIR builders, not torch-mlir's FX importer and its
`torch` dialect:

- Our dialects are the ATen operator set itself (`aten.<op>` generated from
  torch's schemas), so an FX node maps onto one op by name and schema-ordered
  arguments. torch-mlir's route goes FX -> `torch` dialect (`!torch.vtensor`,
  `!torch.int` values, one op per *registered* ODS op) -> our dialect, which
  is a second full conversion to write and keep in sync with torch-mlir's op
  coverage, for no information we don't already have.
- Constants: torch-mlir's importer inlines weights as `dense_resource`
  blobs in the IR. We want them out of the IR entirely (they become the
  `.pte` constant segment unchanged), with the FX graph signature (which
  placeholder is a parameter, a buffer, a mutated buffer) kept as globals.
- Diagnostics: we choose the location of each op (the innermost frame of the
  user's code in `node.meta["stack_trace"]`, see `locations.py`) and raise
  our own located errors for constructs we do not support, before any IR
  exists for them.
- Dynamic shapes: `torch.export.Dim` ranges from `range_constraints` go
  straight into `etc.dim_bounds`, which memory planning needs for upper
  bounds; torch-mlir keeps them in `torch.bind_symbolic_shape` ops we would
  have to read back.

The importer does not decompose anything: `to_edge` runs torch's Core ATen
decompositions before calling it. It does functionalize a graph that still
has in-place ops (torch.export's training IR keeps `add_`, `copy_`), because
the IR is in value semantics; buffer writes then appear as the graph
signature's buffer mutations, imported as `ml_program.global_store`.
"""

from __future__ import annotations

import operator
from typing import Any, Mapping

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch_mlir import ir
from torch_mlir.dialects import arith, func, ml_program, tensor as tensor_dialect

from etc.compiler.import_state import ProgramState, StateInput
from etc.compiler.ir import USER_INPUT, InputInfo, MethodSignature, ProgramIR
from etc.dialects.custom_ops import BUILTIN_NAMESPACES
from etc.dialects.quantized_ops import NAMESPACES as QUANTIZATION_NAMESPACES
from etc.errors import EtcError, UnsupportedConstructError
from etc.ir.dtypes import element_type
from etc.ir.locations import named_location, node_location, node_source_position

__all__ = ["import_program", "DIM_BOUNDS_ATTR", "UNBOUNDED"]

DIM_BOUNDS_ATTR = "etc.dim_bounds"
UNBOUNDED = -1  # the `max` of a dimension with no upper bound

# A user input torch.export specialized to a constant (an `int` argument):
# it has a placeholder but no value at runtime.
SPECIALIZED_INPUT = "specialized_input"

# Runtime checks torch.export inserts for symbolic sizes. The bounds they
# check are already in `etc.dim_bounds` (the runtime checks inputs against
# them), so they are dropped, with the symbolic comparisons only they use.
_ASSERTION_TARGETS = frozenset(
    getattr(torch.ops.aten, name).default
    for name in ("_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range",
                 "sym_constrain_range_for_size")
    if hasattr(torch.ops.aten, name)
) | {torch.ops.aten._assert_async.msg}

# Arithmetic on symbolic sizes (`b * 3`, `t // 2`), on `index` values.
# Sizes are non-negative, where `arith.remsi` (truncating) equals Python's `%`.
_SYMINT_ARITHMETIC = {
    operator.add: arith.AddIOp,
    operator.sub: arith.SubIOp,
    operator.mul: arith.MulIOp,
    operator.floordiv: arith.FloorDivSIOp,
    operator.mod: arith.RemSIOp,
    torch.sym_max: arith.MaxSIOp,
    torch.sym_min: arith.MinSIOp,
}


# ====================================================================== API
def import_program(programs, *, context: ir.Context | None = None) -> ProgramIR:
    """Import an ExportedProgram, or a dict method name -> ExportedProgram, into
    one aten-dialect module (one `func.func` per method, shared globals).

    Raises UnsupportedConstructError, located at the user's source line, for a
    construct etc cannot represent (higher-order ops other than cond/while_loop, custom
    objects, non-ATen operators, unsupported dtypes, input mutation).
    """
    methods = _as_method_dict(programs)
    if context is None:
        from etc.dialects import make_context

        context = make_context()
    methods = {name: _functionalized(ep) for name, ep in methods.items()}
    return _ModuleImporter(context).run(methods)


def _as_method_dict(programs) -> dict[str, ExportedProgram]:
    if isinstance(programs, ExportedProgram):
        return {"forward": programs}
    if isinstance(programs, Mapping):
        if not programs:
            raise EtcError("import_program: no methods given")
        for name, ep in programs.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise EtcError(f"import_program: method name {name!r} is not an identifier")
            if not isinstance(ep, ExportedProgram):
                raise EtcError(f"import_program: method '{name}' is a {type(ep).__name__}, "
                               "not a torch.export.ExportedProgram")
        return dict(programs)
    raise EtcError(f"import_program expects an ExportedProgram or a dict of them, got {type(programs).__name__}")


def _functionalized(ep: ExportedProgram) -> ExportedProgram:
    """The program in value semantics. torch.export's default (training) IR
    keeps in-place ops; an empty decomposition table functionalizes them
    (buffer writes become BUFFER_MUTATION outputs) without decomposing."""
    for node in ep.graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            return ep.run_decompositions({})
    return ep


# ============================================================ the importer
class _ModuleImporter:
    def __init__(self, context: ir.Context):
        self.context = context
        self.state = ProgramState()
        self.globals = self.state.globals

    def run(self, methods: dict[str, ExportedProgram]) -> ProgramIR:
        states = {name: self.state.collect(name, ep) for name, ep in methods.items()}
        signatures = {}
        with self.context, ir.Location.unknown():
            module = ir.Module.create()
            with ir.InsertionPoint(module.body):
                for symbol in self.globals.values():
                    self.state.emit_global(symbol)
                for name, ep in methods.items():
                    signatures[name] = _MethodImporter(self, name, ep, states[name]).run()
        constants = {g.name: g.array for g in self.globals.values()}
        dtypes = {g.name: g.dtype_name for g in self.globals.values()}
        return ProgramIR(module, self.context, constants, signatures, dtypes)

# ======================================================== one FX graph
class _MethodImporter:
    """Imports one method: its func, its FX nodes in order, its stores."""

    def __init__(self, module_importer: _ModuleImporter, name: str, ep: ExportedProgram,
                 state: dict[str, StateInput]):
        self.module_importer = module_importer
        self.name = name
        self.ep = ep
        self.state = state
        self.values: dict[torch.fx.Node, Any] = {}
        self.signature = MethodSignature(name)
        self.ranges = dict(ep.range_constraints)
        self.signature.symbols = {str(symbol): self._range_of(symbol) for symbol in self.ranges}

    # ------------------------------------------------------------- shapes
    def _range_of(self, expr) -> tuple[int, int]:
        """(min, max) of a size expression over the program's symbol ranges."""
        from torch.utils._sympy.numbers import int_oo
        from torch.utils._sympy.value_ranges import bound_sympy

        bounds = bound_sympy(expr, self.ranges)
        lower = int(bounds.lower) if bounds.lower not in (-int_oo,) and bounds.lower.is_finite else 0
        upper = int(bounds.upper) if bounds.upper is not int_oo and bounds.upper.is_finite else UNBOUNDED
        return lower, upper

    @staticmethod
    def _static_size(size) -> int | None:
        if isinstance(size, int):
            return size
        expr = size.node.expr
        return int(expr) if expr.is_number else None

    def _dim_bounds(self, value) -> list[tuple[int, int]]:
        if isinstance(value, torch.SymInt):
            return [self._range_of(value.node.expr)]
        bounds = []
        for size in value.shape:
            static = self._static_size(size)
            bounds.append((static, static) if static is not None else self._range_of(size.node.expr))
        return bounds

    def _type_of(self, value, node: torch.fx.Node) -> ir.Type:
        """MLIR type of a traced value: a ranked tensor (symbolic dims as `?`)
        or `index` for a symbolic int."""
        if isinstance(value, torch.Tensor):
            shape = [self._static_size(size) for size in value.shape]
            shape = [ir.ShapedType.get_dynamic_size() if size is None else size for size in shape]
            try:
                return ir.RankedTensorType.get(shape, element_type(value.dtype))
            except UnsupportedConstructError as error:
                raise self._error(node, f"{error.message} (value of '{node.name}')") from None
        if isinstance(value, (torch.SymInt, int)) and not isinstance(value, bool):
            return ir.IndexType.get()
        raise self._error(node, f"'{node.name}' produces a {type(value).__name__}; etc imports tensors "
                                "and integer sizes only")

    # ------------------------------------------------------------- errors
    def _error(self, node: torch.fx.Node, message: str) -> UnsupportedConstructError:
        position = node_source_position(node)
        return UnsupportedConstructError(
            message, location=str(position) if position else None,
            notes=[f"in method '{self.name}', FX node: {node.format_node()}"])

    # ---------------------------------------------------------------- run
    def run(self) -> MethodSignature:
        graph = self.ep.graph
        placeholders = [node for node in graph.nodes if node.op == "placeholder"]
        output_node = graph.output_node()
        input_specs = {spec.arg.name: spec for spec in self.ep.graph_signature.input_specs
                       if hasattr(spec.arg, "name")}
        user_args = self._record_inputs(placeholders, input_specs)
        user_outputs, stores = self._split_outputs(output_node)

        arg_types = [self._type_of(node.meta["val"], node) for node in user_args]
        result_types = [self._type_of(value.meta.get("val"), value) for value in user_outputs]
        position = self._first_position(graph)
        function = func.FuncOp(self.name, ir.FunctionType.get(arg_types, result_types),
                               loc=named_location(self.name, position))
        block = function.add_entry_block(arg_locs=[node_location(node) for node in user_args])
        self.signature.dim_bounds = [self._dim_bounds(node.meta["val"]) for node in user_args]
        function.arg_attrs = ir.ArrayAttr.get([
            ir.DictAttr.get({DIM_BOUNDS_ATTR: ir.DenseI64ArrayAttr.get(
                [bound for pair in bounds for bound in pair])})
            for bounds in self.signature.dim_bounds])

        with ir.InsertionPoint(block):
            for node, argument in zip(user_args, block.arguments):
                self.values[node] = argument
            self._load_state(placeholders)
            skipped = self._skipped_nodes(graph)
            for node in graph.nodes:
                if node.op in ("placeholder", "output") or node in skipped:
                    continue
                self._import_node(node)
            for global_name, value in stores:
                ml_program.GlobalStoreOp(global_name, self._value(value, output_node),
                                         loc=named_location(value.name if isinstance(value, torch.fx.Node)
                                                            else "output"))
            func.ReturnOp([self._value(value, output_node) for value in user_outputs],
                          loc=node_location(output_node))
        return self.signature

    @staticmethod
    def _first_position(graph):
        for node in graph.nodes:
            position = node_source_position(node)
            if position is not None:
                return position
        return None

    def _record_inputs(self, placeholders, input_specs) -> list[torch.fx.Node]:
        """Fill signature.inputs; return the placeholders that become func arguments."""
        user_args = []
        for node in placeholders:
            spec = input_specs.get(node.name)
            if node.name in self.state:
                state = self.state[node.name]
                self.signature.inputs.append(InputInfo(node.name, state.kind, state.target, state.global_name))
            elif spec is not None and spec.kind == InputKind.USER_INPUT:
                value = node.meta.get("val")
                if isinstance(value, (torch.Tensor, torch.SymInt)):
                    self.signature.inputs.append(InputInfo(node.name, USER_INPUT))
                    user_args.append(node)
                else:  # specialized by torch.export: used as a constant in the graph
                    self.signature.inputs.append(InputInfo(node.name, SPECIALIZED_INPUT))
                    self.values[node] = value
            else:
                kind = spec.kind.name.lower() if spec is not None else "unknown"
                raise self._error(node, f"input '{node.name}' of kind {kind} is not supported "
                                        "(etc imports user inputs, parameters, buffers and constant tensors)")
        return user_args

    def _split_outputs(self, output_node):
        """User outputs (func results) and buffer stores (global name, value)."""
        values = output_node.args[0]
        user_outputs, stores = [], []
        for spec, value in zip(self.ep.graph_signature.output_specs, values):
            if spec.kind == OutputKind.USER_OUTPUT:
                if not isinstance(value, torch.fx.Node):
                    raise self._error(output_node, f"method '{self.name}' returns the constant {value!r}; "
                                                   "etc methods return tensors")
                user_outputs.append(value)
                self.signature.outputs.append(value.name)
            elif spec.kind == OutputKind.BUFFER_MUTATION:
                placeholder = next(name for name, s in self.state.items() if s.target == spec.target)
                global_name = self.state[placeholder].global_name
                stores.append((global_name, value))
                self.signature.mutated_buffers[global_name] = value.name
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                node = value if isinstance(value, torch.fx.Node) else output_node
                raise self._error(node, f"method '{self.name}' writes into its input '{spec.target}' "
                                        "in place; etc inputs are read-only (clone the input first)")
            else:
                raise self._error(output_node, f"output kind {spec.kind.name} is not supported "
                                               "(etc imports inference programs)")
        return user_outputs, stores

    def _load_state(self, placeholders) -> None:
        for node in placeholders:
            state = self.state.get(node.name)
            if state is None:
                continue
            symbol = self.module_importer.globals[state.global_name]
            result_type = self._type_of(node.meta["val"], node)
            load = ml_program.GlobalLoadOp if symbol.mutable else ml_program.GlobalLoadConstOp
            self.values[node] = load(result_type, state.global_name, loc=node_location(node)).result

    @staticmethod
    def _skipped_nodes(graph) -> set:
        """Assertion nodes, and nodes used only by skipped nodes."""
        skipped = set()
        for node in reversed(graph.nodes):
            if node.op != "call_function":
                continue
            if node.target in _ASSERTION_TARGETS or (node.users and all(user in skipped for user in node.users)):
                skipped.add(node)
        return skipped

    # -------------------------------------------------------------- nodes
    def _value(self, argument, node: torch.fx.Node):
        """The import of one FX argument: ir.Value(s) for nodes, python values otherwise."""
        if isinstance(argument, torch.fx.Node):
            if argument not in self.values:
                raise self._error(node, f"'{node.name}' uses '{argument.name}' ({argument.op}), "
                                        "which etc could not import")
            return self.values[argument]
        if isinstance(argument, (list, tuple)):
            return [self._value(item, node) for item in argument]
        return argument

    def _import_node(self, node: torch.fx.Node) -> None:
        if node.op == "get_attr":
            # A submodule (the branches of torch.cond, ...): only a higher-order
            # op uses one, and that op is the construct to report.
            return
        if node.op != "call_function":
            raise self._error(node, f"FX '{node.op}' nodes ('{node.name}', target {node.target}) are not "
                                    "supported; etc imports graphs of ATen operator calls")
        target = node.target
        if target is operator.getitem:
            source, index = node.args
            self.values[node] = self._value(source, node)[index]
            return
        traced = node.meta.get("val")
        if isinstance(traced, torch.SymBool):  # `x.shape[0] > 4`: a torch.cond predicate
            from etc.compiler.import_control_flow import import_size_comparison

            import_size_comparison(self, node)
            return
        if isinstance(traced, torch.SymInt) or (isinstance(traced, int) and not isinstance(traced, bool)):
            static = self._static_size(traced)
            if static is not None:  # a size torch.export already knows: a plain int
                self.values[node] = static
                return
            self._import_symint(node)
            return
        if isinstance(target, torch._ops.OpOverload) and (target.namespace == "aten"
                                                          or target.namespace in QUANTIZATION_NAMESPACES):
            self._import_aten(node)
            return
        if isinstance(target, torch._ops.OpOverload) and target.namespace not in BUILTIN_NAMESPACES:
            self._import_aten(node, custom=True)  # a user's operator (torch.library): aten.custom_op
            return
        if isinstance(target, torch._ops.HigherOrderOperator):
            from etc.compiler.import_control_flow import import_control_flow

            if import_control_flow(self, node):  # torch.cond, torch.while_loop -> scf
                return
        raise self._error(node, self._unsupported_target_message(node))

    @staticmethod
    def _unsupported_target_message(node) -> str:
        target = node.target
        if isinstance(target, torch._ops.HigherOrderOperator) and target.name().startswith("auto_functionalized"):
            mutated = node.args[0] if node.args else None
            name = getattr(getattr(mutated, "_schema", None), "name", str(mutated))
            return (f"custom operator {name} writes its arguments (mutates_args); etc imports functional custom "
                    "operators: return new tensors instead")
        if isinstance(target, torch._ops.HigherOrderOperator):
            return (f"torch.ops.higher_order.{target.name()} is not supported: etc imports torch.cond and "
                    "torch.while_loop (write map/scan as a while_loop, or unroll it in Python)")
        if isinstance(target, torch._ops.OpOverload):
            return (f"operator {target.namespace}::{target._schema.name.split('::')[-1]}"
                    f"{'.' + target._overloadname if target._overloadname != 'default' else ''} is not an ATen "
                    "operator; etc imports ATen operators only")
        name = getattr(target, "__qualname__", None) or str(target)
        return f"call to '{name}' (node '{node.name}') is not supported; etc imports ATen operators only"

    def _import_symint(self, node: torch.fx.Node) -> None:
        """A symbolic size: `aten.sym_size.int` -> `tensor.dim`; arithmetic on
        sizes -> `arith` on `index`."""
        location = node_location(node)
        if node.target is torch.ops.aten.sym_size.int:
            source, dim = node.args
            # A size that is an input's dim is read from that input: sizes then depend on the
            # inputs only, not on intermediate tensors (a partition can compute them itself).
            source, dim = self._input_dim(node.meta.get("val")) or (source, dim)
            source_value = self._value(source, node)
            rank = len(source.meta["val"].shape)
            dim_index = arith.ConstantOp(ir.IndexType.get(), dim % rank, loc=location).result
            self.values[node] = tensor_dialect.DimOp(source_value, dim_index, loc=location).result
            return
        if node.target is operator.pow and isinstance(node.args[1], int) and 0 <= node.args[1] <= 8:
            # s ** 2 (torch's decompositions write d * d of a Dim so): a product of the base.
            base = self._index(node.args[0], node, location)
            result = arith.ConstantOp(ir.IndexType.get(), 1, loc=location).result
            for _ in range(node.args[1]):
                result = arith.MulIOp(result, base, loc=location).result
            self.values[node] = result
            return
        arithmetic = _SYMINT_ARITHMETIC.get(node.target)
        if arithmetic is None or len(node.args) != 2:
            raise self._error(node, f"symbolic size computation '{getattr(node.target, '__name__', node.target)}' "
                                    f"(node '{node.name}') is not supported")
        lhs, rhs = (self._index(argument, node, location) for argument in node.args)
        self.values[node] = arithmetic(lhs, rhs, loc=location).result

    def _input_dim(self, size):
        """(placeholder node, dim) of the first tensor input whose dim is the symbol `size`, or None."""
        expr = getattr(getattr(size, "node", None), "expr", None)
        if expr is None or not getattr(expr, "is_Symbol", False):
            return None
        if not hasattr(self, "_symbol_dims"):
            self._symbol_dims = {}
            for placeholder in self.ep.graph.nodes:
                if placeholder.op != "placeholder" or not isinstance(placeholder.meta.get("val"), torch.Tensor):
                    continue
                for d, n in enumerate(placeholder.meta["val"].shape):
                    e = getattr(getattr(n, "node", None), "expr", None)
                    if e is not None and getattr(e, "is_Symbol", False):
                        self._symbol_dims.setdefault(e, (placeholder, d))
        found = self._symbol_dims.get(expr)
        return found if found is not None and found[0] in self.values else None

    def _index(self, argument, node, location) -> ir.Value:
        value = self._value(argument, node)
        if isinstance(value, int):
            return arith.ConstantOp(ir.IndexType.get(), value, loc=location).result
        return value

    def _import_aten(self, node: torch.fx.Node, custom: bool = False) -> None:
        from etc.dialects.aten import build_op

        if custom:
            from etc.dialects.custom_ops import build as build_op  # noqa: F811 (the generic op, by schema)
        target: torch._ops.OpOverload = node.target
        arguments = self._schema_arguments(node)
        traced = node.meta.get("val")
        result_types = self._result_types(traced, node)
        location = node_location(node)
        try:
            operation = build_op(_torch_op_name(target), arguments, result_types, loc=location)
        except EtcError as error:
            if error.location is None:
                position = node_source_position(node)
                error.location = str(position) if position else None
                error.notes.append(f"in method '{self.name}', FX node: {node.format_node()}")
            raise
        self.values[node] = self._structure_results(traced, list(operation.results))

    def _schema_arguments(self, node: torch.fx.Node) -> dict[str, Any]:
        """FX args/kwargs by schema argument name, defaults filled in."""
        schema = node.target._schema
        arguments = {}
        for position, argument in enumerate(schema.arguments):
            if position < len(node.args) and not argument.kwarg_only:
                value = node.args[position]
            elif argument.name in node.kwargs:
                value = node.kwargs[argument.name]
            elif argument.has_default_value():
                value = argument.default_value
            else:
                value = None
            arguments[argument.name] = self._value(value, node)
        return arguments

    def _result_types(self, traced, node) -> list[ir.Type]:
        """Flat result types of an op whose traced value is `traced` (a tensor,
        or a tuple/list of tensors, possibly nested for `Tensor[]` results)."""
        if traced is None:
            return []
        if isinstance(traced, (list, tuple)):
            return [result for item in traced for result in self._result_types(item, node)]
        return [self._type_of(traced, node)]

    @staticmethod
    def _structure_results(traced, results: list[ir.Value]):
        """Mirror the traced value's nesting onto the op's flat results, so that
        `getitem` indexes them as the FX graph does."""
        remaining = iter(results)

        def build(item):
            if item is None:
                return None
            if isinstance(item, (list, tuple)):
                return [build(inner) for inner in item]
            return next(remaining)

        if isinstance(traced, (list, tuple)):
            return build(traced)
        return next(remaining) if results else None


def _torch_op_name(target: torch._ops.OpOverload) -> str:
    """`torch.ops.aten.add.Tensor` -> "aten::add.Tensor" (the default overload
    has no suffix: "aten::relu")."""
    name = target._schema.name
    return name if target._overloadname == "default" else f"{name}.{target._overloadname}"
