"""Emission: the planned edge/backend MLIR program -> `.pte` program tables.

Each public `func.func` becomes an ExecutionPlan with one Chain:
- every tensor SSA value becomes a Tensor EValue (planned ones carry the
  `etc.alloc` placement the memory planner wrote; constants point into the
  constant segment; unplanned inputs/outputs get their memory at execute time);
- every edge op becomes a KernelCall on its out-variant kernel (`aten::add.out`),
  with ExecuTorch's argument convention: every schema argument of the out
  variant in order (defaults filled, `out=` included), then the returned tensors
  again;
- every `backend.delegate` becomes a DelegateCall (inputs, then outputs) on a
  BackendDelegate whose blob goes into a segment.

Every operator a program names is checked here against the kernel set it will
run on, so a missing kernel is a compile error at the user's source line, not an
`OperatorMissing` at load time on the device.
"""

from __future__ import annotations

from etc.compiler import emit_control_flow
from etc.compiler.emit_data import ProgramData, external_tag_function
from etc.dialects.out_variants import kernel_schema, out_variant_name
from etc.errors import LoweringError, SerializationError, UnsupportedConstructError
from etc.ir.dtypes import scalar_type_of
from etc.ir.schema_types import schema_type
from etc.passes.memory_planning import planned_alloc, result_alloc
from etc.passes.in_place_state import in_place_symbols


_ARG_TYPES: dict = {}


def kernel_argument_types(qualified: str) -> list[str]:
    """The argument types of a kernel as native_functions.yaml writes them
    (`ScalarType?`, `int[]?`, `Scalar`): torch._C prints dtypes as `int` and
    Scalars as `number`, which would lose what the emitter must know."""
    if qualified not in _ARG_TYPES:
        from etc.dialects.gen_aten_ops import parse_schema

        parsed = parse_schema(kernel_schema(qualified))
        if parsed is None:
            raise LoweringError(f"cannot read the schema of kernel '{qualified}'")
        _ARG_TYPES[qualified] = [str(a.type) for a in parsed.arguments.flat_all]
    return _ARG_TYPES[qualified]


# `arith` ops on `index` sizes -> ExecuTorch's prim ops (sizes are non-negative,
# so truncating division and remainder agree with Python's).
SYMBOLIC_ARITHMETIC = {
    "arith.addi": "executorch_prim::add.Scalar",
    "arith.subi": "executorch_prim::sub.Scalar",
    "arith.muli": "executorch_prim::mul.Scalar",
    "arith.floordivsi": "executorch_prim::floordiv.Scalar",
    "arith.divsi": "executorch_prim::floordiv.Scalar",
    "arith.remsi": "executorch_prim::mod.Scalar",
    "arith.maxsi": "executorch_prim::sym_max.Scalar",
    "arith.minsi": "executorch_prim::sym_min.Scalar",
}


def _where(op) -> str:
    from etc.ir.locations import format_location as render_location

    return render_location(op.location)


def _attr_ints(attr) -> list[int]:
    return [int(x) for x in attr]


class _MethodEmitter:
    """Emits one `func.func` as one ExecutionPlan."""

    def __init__(self, func_op, state: ProgramData, kernels: set[str]):
        from etc.schema import program as S

        self.S = S
        self.func = func_op
        self.state = state
        self.kernels = kernels
        self.values: list = []
        self.index: dict = {}  # ir.Value -> EValue index
        self.operators: list = []
        self.operator_index: dict = {}
        self.instructions: list = []
        self.delegates: list = []
        self.const_values: dict = {}  # (kind, python value) -> EValue index, to share scalars
        self.frames: list = []  # one FrameList per instruction: where in the user's code it came from
        # (op, EValue indices of its results) per instruction: what a compile record maps back to the source.
        self.instruction_ops: list = []
        # Buffers the method writes live in one extra arena (the last mem_id), each at
        # its own offset for the whole run, initialised from the mutable data segment.
        self.state_values: dict = {}  # global symbol -> EValue index
        self.state_allocations: list = []
        self.state_bytes = 0

    # ---------------------------------------------------------------- values
    def add_value(self, val) -> int:
        self.values.append(self.S.EValue(val=val))
        return len(self.values) - 1

    def tensor(self, value, *, alloc=None, data_buffer_idx: int = 0, state_name: str | None = None) -> int:
        from torch_mlir import ir

        S = self.S
        ty = ir.RankedTensorType(value.type)
        element = str(ty.element_type)
        try:
            scalar_type = scalar_type_of(element)
        except SerializationError:
            raise LoweringError(f"tensors of element type {element} have no .pte scalar type") from None
        dynamic = not ty.has_static_shape
        sizes = list(ty.shape)
        if dynamic:
            sizes = self._upper_bounds(value, sizes)
        allocation = None
        if alloc is not None:
            mem_id, offset = alloc
            allocation = S.AllocationDetails(memory_id=mem_id or 0, memory_offset_low=offset & 0xFFFFFFFF,
                                             memory_offset_high=offset >> 32)
            if mem_id is None:  # the state arena: its mem_id is known once the plan's sizes are
                self.state_allocations.append(allocation)
        t = S.Tensor(
            scalar_type=S.ScalarType(scalar_type),
            storage_offset=0,
            sizes=sizes,
            dim_order=list(range(len(sizes))),
            requires_grad=False,
            data_buffer_idx=data_buffer_idx,
            allocation_info=allocation,
            layout=0,
            shape_dynamism=S.TensorShapeDynamism.DYNAMIC_BOUND if dynamic else S.TensorShapeDynamism.STATIC,
            extra_tensor_info=None if state_name is None else S.ExtraTensorInfo(fully_qualified_name=state_name),
        )
        i = self.add_value(t)
        self.index[value] = i
        return i

    def load_constant(self, symbol: str, op) -> None:
        """A constant tensor: its bytes in the constant segment, or (`external_constants`) in a .ptd,
        the tensor naming them as ExecuTorch's do: `ExtraTensorInfo(fully_qualified_name, EXTERNAL)`."""
        S = self.S
        result = op.results[0]
        index = self.tensor(result)
        t = self.values[index].val
        if self.state.external(symbol, op, t.scalar_type, t.sizes) is not None:
            t.extra_tensor_info = S.ExtraTensorInfo(fully_qualified_name=symbol,
                                                    location=S.TensorDataLocation.EXTERNAL)
        else:
            t.data_buffer_idx = self.state.constant(symbol, op)

    def _upper_bounds(self, value, sizes: list[int]) -> list[int]:
        """Dynamic dims are planned at their upper bound, recorded by to_edge as `etc.upper_bounds`."""
        from torch_mlir import ir

        from etc.ir.shapes import upper_bounds

        bounds = upper_bounds(value)
        if bounds is not None:
            return bounds
        owner = value.owner
        raise LoweringError("a tensor with a dynamic dimension has no known upper bound", location=_where(
            owner if not isinstance(owner, ir.Block) else self.func))

    def scalar(self, python_value) -> int:
        """An Int/Double/Bool/Null/String EValue for a Python value (shared when equal)."""
        S = self.S
        key = (type(python_value).__name__, repr(python_value))
        if key in self.const_values:
            return self.const_values[key]
        if python_value is None:
            val = S.Null()
        elif isinstance(python_value, bool):
            val = S.Bool(bool_val=python_value)
        elif isinstance(python_value, int):
            val = S.Int(int_val=python_value)
        elif isinstance(python_value, float):
            val = S.Double(double_val=python_value)
        elif isinstance(python_value, str):
            val = S.String(string_val=python_value)
        else:
            raise LoweringError(f"cannot emit a scalar argument of type {type(python_value).__name__}")
        i = self.add_value(val)
        self.const_values[key] = i
        return i

    def argument(self, arg_type: str, python_value, op) -> int:
        """Emit one schema argument; `arg_type` is torch's type string (`int[]`, `Tensor?`, ...)."""
        from torch_mlir import ir

        if isinstance(python_value, ir.Value):
            if python_value not in self.index:
                raise LoweringError("an operand is not defined by an emitted value", location=_where(op))
            return self.index[python_value]
        if python_value is None:
            return self.scalar(None)
        row = schema_type(arg_type)
        emit = EVALUE_OF_KIND.get(row.kind)
        return emit(self, row, python_value, op) if emit else self.scalar(python_value)

    def operator(self, qualified: str) -> int:
        if qualified not in self.operator_index:
            name, _, overload = qualified.partition(".")
            self.operators.append(self.S.Operator(name=name, overload=overload))
            self.operator_index[qualified] = len(self.operators) - 1
        return self.operator_index[qualified]

    # ----------------------------------------------------------- instructions
    def kernel_call(self, op) -> None:
        from etc.dialects import decode_op, op_info

        from etc.dialects import custom_ops

        custom = custom_ops.is_custom(op)
        info = op_info(op) if custom else op_info(op.name)
        try:
            kernel = custom_ops.out_variant(info.torch_name) if custom else out_variant_name(info.torch_name)
        except LoweringError as error:
            error.location = error.location or _where(op)
            raise
        if kernel is None:
            raise LoweringError(f"'{info.torch_name}' has no out variant to run as a kernel", location=_where(op))
        # A user's operator may have its kernel only where the program runs (C++ linked into ExecuTorch):
        # etc's runtime names it at load if no Python kernel is registered (etc.runtime.register_kernel).
        if kernel not in self.kernels and not custom:
            raise LoweringError(
                f"no kernel for '{kernel}' (from '{info.torch_name}') in the portable kernel library; "
                "decompose the op, delegate it to a backend, or register a kernel", location=_where(op))
        values = decode_op(op)
        schema = kernel_schema(kernel)
        results = list(op.results)
        # Results first: an out argument names its storage (a mutable buffer's own, for a result
        # etc-in-place-state marked: the kernel updates the buffer, which its store then skips).
        in_place = in_place_symbols(op)
        result_indices = [self._state_result(in_place[n], r, op) if in_place[n] else
                          self.tensor(r, alloc=result_alloc(op, n)) for n, r in enumerate(results)]
        args, out_args = [], []
        out_position = 0
        for a, type_text in zip(schema.arguments, kernel_argument_types(kernel)):
            if a.is_out:
                if type_text.startswith("Tensor") and type_text.endswith("[]"):  # `Tensor(a!)[] out`: all results
                    out_args.append(self.add_value(self.S.TensorList(items=result_indices[out_position:])))
                    out_position = len(result_indices)
                else:
                    out_args.append(result_indices[out_position])
                    out_position += 1
                args.append(out_args[-1])
            elif a.name in values:
                args.append(self.argument(type_text, values[a.name], op))
            elif a.default_value is not None or type_text.endswith("?"):
                args.append(self.argument(type_text, _torch_default(a), op))
            else:
                raise LoweringError(f"'{info.torch_name}' gives no value for '{a.name}' of kernel '{kernel}'",
                                    location=_where(op))
        # Then the kernel's return value, as ExecuTorch's emitter writes it: the out
        # tensor for one return, a TensorList of the outs for several, and the out
        # arguments again for `-> ()` kernels (`split_with_sizes_copy.out`).
        if len(schema.returns) == 1:
            args.append(result_indices[0])
        elif len(schema.returns) > 1:
            args.append(self.add_value(self.S.TensorList(items=result_indices)))
        else:
            args += out_args
        self.instruction(self.S.KernelCall(op_index=self.operator(kernel), args=args), op)

    def instruction(self, instr_args, op) -> None:
        """Append an instruction and its stack trace (the user's file:line of `op`), which
        runtimes use to point a failure at the model's source."""
        from etc.ir.locations import location_name, source_position

        self.instructions.append(self.S.Instruction(instr_args=instr_args))
        self.instruction_ops.append((op, [self.index.get(r) for r in op.results]))
        position = source_position(op.location)
        frames = []
        if position is not None:
            frames.append(self.S.Frame(filename=position.file, lineno=position.line,
                                       name=location_name(op.location) or op.name, context=""))
        self.frames.append(self.S.FrameList(items=frames))

    def _state(self, symbol: str, value, op) -> int:
        """The EValue of mutable buffer `symbol` (one per method), planned in the state arena."""
        from torch_mlir import ir

        if symbol not in self.state_values:
            ty = ir.RankedTensorType(value.type)
            nbytes = _nbytes(ty)
            offset = self.state_bytes
            self.state_bytes += (nbytes + 15) // 16 * 16
            index = self.tensor(value, alloc=(None, offset), data_buffer_idx=self.state.mutable(symbol, op),
                                state_name=symbol)
            self.state_values[symbol] = index
        return self.state_values[symbol]

    def _state_result(self, symbol: str, value, op) -> int:
        """A result that is buffer `symbol`'s new value, computed in the buffer's own storage."""
        index = self._state(symbol, value, op)
        self.index[value] = index
        return index

    def load_state(self, op) -> None:
        from torch_mlir import ir

        symbol = ir.FlatSymbolRefAttr(op.attributes["global"]).value
        self.index[op.results[0]] = self._state(symbol, op.results[0], op)

    def store_state(self, op) -> None:
        """`global_store @b = %v` -> `aten::copy.out(b, v, False, out=b)`: the new state is
        written into the buffer's own storage, where the next run reads it."""
        from torch_mlir import ir

        symbol = ir.FlatSymbolRefAttr(op.attributes["global"]).value
        value = op.operands[0]
        buffer = self._state(symbol, value, op)
        kernel = "aten::copy.out"
        if kernel not in self.kernels:
            raise LoweringError(f"no kernel for '{kernel}' (writing buffer '{symbol}')", location=_where(op))
        if value not in self.index:
            raise LoweringError("the value stored into a buffer is not defined by an emitted value",
                                location=_where(op))
        if self.index[value] == buffer:  # computed in the buffer's storage (etc-in-place-state): nothing to copy
            return
        args = [buffer, self.index[value], self.scalar(False), buffer, buffer]
        self.instruction(self.S.KernelCall(op_index=self.operator(kernel), args=args), op)

    def symbolic_size(self, op) -> None:
        """A size computed at run time (dynamic shapes): `tensor.dim` becomes
        `aten::sym_size.int`, `arith` on `index` ExecuTorch's prim ops, each
        writing a fresh Int EValue that IntList arguments then refer to."""
        name = op.operation.name
        kernel = "aten::sym_size.int" if name == "tensor.dim" else SYMBOLIC_ARITHMETIC[name]
        if kernel not in self.kernels:
            raise LoweringError(f"no kernel for '{kernel}' (a size computed at run time) in the kernel library",
                                location=_where(op))
        args = [self.index[v] if v in self.index else self._missing(v, op) for v in op.operands]
        result = self.add_value(self.S.Int(int_val=0))  # not shared: the kernel writes it
        self.index[op.results[0]] = result
        self.instruction(self.S.KernelCall(op_index=self.operator(kernel), args=args + [result]), op)

    def _missing(self, value, op):
        raise LoweringError("an operand is not defined by an emitted value", location=_where(op))

    def delegate_call(self, op) -> None:
        from torch_mlir import ir

        S = self.S
        inputs = [self.index[v] for v in op.operands]
        in_place = in_place_symbols(op)  # outputs computed in a mutable buffer (delegation._mark_in_place_outputs)
        outputs = [self._state_result(in_place[n], r, op) if in_place[n] else
                   self.tensor(r, alloc=result_alloc(op, n)) for n, r in enumerate(op.results)]
        backend_id = ir.StringAttr(op.attributes["backend_id"]).value
        blob_index = int(ir.IntegerAttr(op.attributes["etc.blob_index"]).value)
        specs = []
        if "compile_specs" in op.attributes:
            for named in ir.DictAttr(op.attributes["compile_specs"]):
                specs.append(S.CompileSpec(key=named.name, value=list(ir.StringAttr(named.attr).value.encode())))
        self.delegates.append(S.BackendDelegate(
            id=backend_id,
            processed=S.BackendDelegateDataReference(location=S.DataLocation.SEGMENT, index=blob_index),
            compile_specs=specs))
        self.instruction(S.DelegateCall(delegate_index=len(self.delegates) - 1, args=inputs + outputs), op)

    def emit(self):
        from torch_mlir import ir

        S = self.S
        block = self.func.regions[0].blocks[0]
        inputs = []
        for arg in block.arguments:
            alloc_attr = _arg_attr(self.func, arg.arg_number, "etc.alloc")
            inputs.append(self.tensor(arg, alloc=planned_alloc(alloc_attr) if alloc_attr is not None else None))
        self.outputs = []
        self.emit_block(block)
        outputs = self.outputs
        name = ir.StringAttr(self.func.attributes["sym_name"]).value
        sizes = [0]
        if "etc.buffer_sizes" in self.func.attributes:
            sizes = _attr_ints(self.func.attributes["etc.buffer_sizes"])
        if self.state_values:
            sizes = sizes + [self.state_bytes]
            for allocation in self.state_allocations:
                allocation.memory_id = len(sizes) - 1
        return S.ExecutionPlan(
            name=name,
            container_meta_type=S.ContainerMetadata(encoded_inp_str="", encoded_out_str=""),
            values=self.values,
            inputs=inputs,
            outputs=outputs,
            chains=[S.Chain(inputs=inputs, outputs=outputs, instructions=self.instructions,
                            stacktrace=self.frames if any(f.items for f in self.frames) else None)],
            operators=self.operators,
            delegates=self.delegates,
            non_const_buffer_sizes=sizes,
        )

    def emit_block(self, block, skip_terminator: bool = False) -> None:
        """Emit the ops of `block` in order (a region's terminator is its caller's to emit)."""
        from torch_mlir import ir

        operations = list(block.operations)
        if skip_terminator:
            operations = operations[:-1]
        for op in operations:
            name = op.operation.name
            if name in emit_control_flow.EMITTERS:
                emit_control_flow.EMITTERS[name](self, op.operation)
            elif name == "ml_program.global_load_const":
                symbol = ir.FlatSymbolRefAttr(op.attributes["global"]).value
                self.load_constant(symbol, op)
            elif name == "ml_program.global_load":
                self.load_state(op)
            elif name == "ml_program.global_store":
                self.store_state(op)
            elif name == "func.return":
                self.outputs = [self.index[v] for v in op.operands]
            elif name == "backend.delegate":
                self.delegate_call(op)
            elif name.startswith("edge."):
                self.kernel_call(op.operation)
            elif name == "arith.constant":
                value = op.attributes["value"]
                self.index[op.results[0]] = self.scalar(int(ir.IntegerAttr(value).value))
            elif name == "tensor.dim" or name in SYMBOLIC_ARITHMETIC:
                self.symbolic_size(op)
            else:
                raise LoweringError(f"'{name}' cannot be emitted: lower it to the edge or backend dialect first",
                                    location=_where(op))


def _nbytes(tensor_type) -> int:
    from etc.ir.dtypes import dtype_row, torch_dtype_name_of_element_type

    count = 1
    for size in tensor_type.shape:
        count *= size
    return count * dtype_row(torch_dtype_name_of_element_type(tensor_type.element_type)).itemsize


def _arg_attr(func_op, index: int, name: str):
    from torch_mlir import ir

    if "arg_attrs" not in func_op.attributes:
        return None
    dicts = ir.ArrayAttr(func_op.attributes["arg_attrs"])
    d = ir.DictAttr(dicts[index])
    return d[name] if name in d else None


def _enum_code(row, value) -> int:
    try:
        return row.code(value)
    except UnsupportedConstructError as error:
        raise LoweringError(error.message) from None


# The emitter's column of the schema-type table (etc.ir.schema_types): kind -> its EValue, as
# ExecuTorch's emitter writes it; a kind not here (int, float, bool, str, Scalar) is a scalar EValue.
EVALUE_OF_KIND = {
    "tensor_list": lambda self, row, value, op: self.add_value(self.S.TensorList(
        items=[self.index[v] if v is not None else -1 for v in value])),
    "optional_tensor_list": lambda self, row, value, op: self.add_value(self.S.OptionalTensorList(
        items=[self.index[v] if v is not None else -1 for v in value])),
    # IntList items are EValue indices of Int values (ExecuTorch's BoxedEvalueList).
    "int_list": lambda self, row, value, op: self.add_value(self.S.IntList(
        items=[self.argument("SymInt", v, op) for v in value])),
    "float_list": lambda self, row, value, op: self.add_value(self.S.DoubleList(items=[float(v) for v in value])),
    "bool_list": lambda self, row, value, op: self.add_value(self.S.BoolList(items=[bool(v) for v in value])),
    # c10 enums as Int EValues (ScalarType, MemoryFormat, Layout).
    "dtype": lambda self, row, value, op: self.scalar(_enum_code(row, value)),
    "enum": lambda self, row, value, op: self.scalar(_enum_code(row, value)),
    "device": lambda self, row, value, op: self.scalar(0),
}


def _torch_default(arg):
    """A schema argument's default as a Python value."""
    value = arg.default_value
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return list(value)
    return value


def registered_kernel_names() -> set[str]:
    """The operators the portable runtime can run (kernels and prim ops)."""
    import etc.runtime.kernels  # noqa: F401 - registers the portable kernels
    import etc.runtime.prim_ops  # noqa: F401 - and ExecuTorch's prim ops
    from etc.runtime.kernels.registry import registered_kernels

    return set(registered_kernels())


def emit_program(program_ir, config=None, *, instruction_ops: dict | None = None,
                 external_data: dict | None = None):
    """ProgramIR (edge/backend dialect, memory planned) -> schema PteFile.

    `instruction_ops`, if given, receives {method: [(op, result EValue indices)]}, one entry per
    instruction in order: the compile record (`etc.compiler.compile_record`) is built from it.
    `external_data`, if given, receives {.ptd name: PtdFile} of the constants `config.external_constants`
    put outside the program."""
    from torch_mlir import ir

    from etc.schema import program as S

    state = ProgramData(constants=program_ir.constants,
                          external_tag=external_tag_function(getattr(config, "external_constants", False)))
    state.delegate_blobs = list(getattr(program_ir, "delegate_blobs", []))
    kernels = registered_kernel_names()
    plans = []
    for op in program_ir.module.body.operations:
        if op.operation.name != "func.func":
            continue
        visibility = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
        if visibility is not None and ir.StringAttr(visibility).value == "private":
            continue
        emitter = _MethodEmitter(op, state, kernels)
        plans.append(emitter.emit())
        if instruction_ops is not None:
            instruction_ops[plans[-1].name] = emitter.instruction_ops
    program = S.Program(
        version=0,
        execution_plan=plans,
        constant_buffer=[],
        backend_delegate_data=[],
        segments=[],
        constant_segment=None,
        mutable_data_segments=[],
        named_data=[],
    )
    pte = S.PteFile(program=program, constant_data=state.constant_data, delegate_segments=state.delegate_blobs,
                    mutable_data=[state.mutable_data] if state.mutable_data else [])
    if external_data is not None:
        external_data.update(state.external_data)
    return pte
