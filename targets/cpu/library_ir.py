"""A native library's objects: the entry wrappers written as LLVM IR (argument checks, the arena
and weights handed to the delegate's code, dynamic dims), linked with the delegate's optimized
module, and emitted as ELF objects by llvmlite (codegen only)."""

from __future__ import annotations

import numpy as np

from etc.errors import LoweringError
from etc.targets.cpu.isa import CpuTarget
from etc.targets.cpu.library_layout import ARENA_ALIGN, ERRORS, WEIGHTS_ALIGN, ArenaLayout, MethodBuild, bare_metal

class _Ir:
    """A function body as LLVM IR text, with fresh value and block names."""

    def __init__(self, ix: str):
        self.ix = ix
        self.lines: list[str] = []
        self.count = 0

    def value(self, text: str) -> str:
        self.count += 1
        name = f"%v{self.count}"
        self.lines.append(f"  {name} = {text}")
        return name

    def emit(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def fail_if(self, condition: str, code: int) -> None:
        """Return `code` when `condition` (an i1) holds."""
        self.count += 1
        ok = f"ok{self.count}"
        self.emit(f"br i1 {condition}, label %fail{code}, label %{ok}")
        self.lines.append(f"{ok}:")

    def gep(self, base: str, offset: int) -> str:
        return self.value(f"getelementptr inbounds i8, ptr {base}, {self.ix} {offset}") if offset else base

    def address(self, pointer: str) -> str:
        return self.value(f"ptrtoint ptr {pointer} to {self.ix}")


def _entry_ir(m: MethodBuild, layout: ArenaLayout, name: str, ix: str) -> str:
    """`int NAME_M(inputs, [input_dims,] outputs, [output_dims,] arena)`: check, bind, call, finish."""
    plan, native = m.plan, m.native
    ir = _Ir(ix)
    dynamic = bool(m.input_dims or m.output_dims)
    params = ["ptr %inputs"] + (["ptr %input_dims"] if dynamic else []) + ["ptr %outputs"] + \
             (["ptr %output_dims"] if dynamic else []) + ["ptr %arena"]
    null, alignment, dims_error, overlap = (ERRORS[k][0] for k in ("NULL", "ALIGNMENT", "DIMS", "OVERLAP"))

    def is_null(pointer):
        return ir.value(f"icmp eq ptr {pointer}, null")

    # The pointer arrays and the pointers in them.
    inputs, outputs = [], []
    for array, count, into in (("%inputs", len(plan.inputs), inputs), ("%outputs", len(plan.outputs), outputs)):
        if count:
            ir.fail_if(is_null(array), null)
        for i in range(count):
            slot = ir.value(f"getelementptr inbounds ptr, ptr {array}, {ix} {i}")
            pointer = ir.value(f"load ptr, ptr {slot}, align {int(ix[1:]) // 8}")
            ir.fail_if(is_null(pointer), null)
            into.append(pointer)
    if dynamic:
        if m.input_dims:
            ir.fail_if(is_null("%input_dims"), null)
        if m.output_dims:
            ir.fail_if(is_null("%output_dims"), null)
    if layout.arena_bytes:
        ir.fail_if(is_null("%arena"), null)
        misaligned = ir.value(f"and {ix} {ir.address('%arena')}, {ARENA_ALIGN - 1}")
        ir.fail_if(ir.value(f"icmp ne {ix} {misaligned}, 0"), alignment)
    for pointer, spec in list(zip(inputs, plan.inputs)) + list(zip(outputs, plan.output_specs)):
        size = np.dtype(spec.dtype).itemsize
        if size > 1:
            low = ir.value(f"and {ix} {ir.address(pointer)}, {size - 1}")
            ir.fail_if(ir.value(f"icmp ne {ix} {low}, 0"), alignment)
    # Dynamic dims: each in its range, shared Dims equal, derived ones (2*s0) as computed.
    dims, symbols = {}, {}
    for position, (i, d) in enumerate(m.input_dims):
        slot = ir.value(f"getelementptr inbounds i32, ptr %input_dims, {ix} {position}")
        value = ir.value(f"sext i32 {ir.value(f'load i32, ptr {slot}, align 4')} to i64")
        dim = plan.inputs[i].dims[d]
        ir.fail_if(ir.value(f"icmp slt i64 {value}, {dim.lo}"), dims_error)
        ir.fail_if(ir.value(f"icmp sgt i64 {value}, {dim.hi}"), dims_error)
        dims[(i, d)] = value
        if dim.expr.isidentifier():
            if dim.expr in symbols:
                ir.fail_if(ir.value(f"icmp ne i64 {value}, {symbols[dim.expr]}"), dims_error)
            else:
                symbols[dim.expr] = value
    for (i, d), value in dims.items():
        expr = plan.inputs[i].dims[d].expr
        if not expr.isidentifier():
            expected = _expression_ir(ir, expr, symbols, plan.name)
            if expected is not None:
                ir.fail_if(ir.value(f"icmp ne i64 {value}, {expected}"), dims_error)

    def nbytes(spec, index=None) -> str:
        """The bytes of input `index` at its run-time sizes (i64), or an output's at its bounds."""
        static = np.dtype(spec.dtype).itemsize
        factors = []
        for d, size in enumerate(spec.dims):
            if index is not None and (index, d) in dims:
                factors.append(dims[(index, d)])
            else:
                static *= int(size.hi if hasattr(size, "hi") else size)
        total = str(static)
        for factor in factors:
            total = ir.value(f"mul i64 {total}, {factor}")
        return total

    def to_ix(value: str) -> str:
        return value if ix == "i64" or not value.startswith("%") else ir.value(f"trunc i64 {value} to {ix}")

    # No output may overlap an input, another output or the arena (the code's buffers are noalias).
    ranges = []
    for i, pointer in enumerate(inputs):
        ranges.append(("input", pointer, to_ix(nbytes(plan.inputs[i], i))))
    for p, pointer in enumerate(outputs):
        ranges.append(("output", pointer, to_ix(nbytes(plan.output_specs[p]))))
    if layout.arena_bytes:
        ranges.append(("arena", "%arena", str(layout.arena_bytes)))
    for a in range(len(ranges)):
        for b in range(a + 1, len(ranges)):
            if "output" not in (ranges[a][0], ranges[b][0]) and "arena" not in (ranges[a][0], ranges[b][0]):
                continue
            (_, pa, na), (_, pb, nb) = ranges[a], ranges[b]
            lo_a, lo_b = ir.address(pa), ir.address(pb)
            hi_a, hi_b = ir.value(f"add {ix} {lo_a}, {na}"), ir.value(f"add {ix} {lo_b}, {nb}")
            both = ir.value(f"and i1 {ir.value(f'icmp ult {ix} {lo_a}, {hi_b}')}, "
                            f"{ir.value(f'icmp ult {ix} {lo_b}, {hi_a}')}")
            nonempty = ir.value(f"and i1 {ir.value(f'icmp ne {ix} {na}, 0')}, {ir.value(f'icmp ne {ix} {nb}, 0')}")
            ir.fail_if(ir.value(f"and i1 {both}, {nonempty}"), overlap)
    # The code's argument array.
    result_pointer = {}
    for p, (kind, k) in enumerate(plan.outputs):
        if kind == "result" and k not in result_pointer:
            result_pointer[k] = outputs[p]
    state = {b.symbol: ir.gep("%arena", m.state_offsets[b.symbol]) for b in plan.state}
    for b in plan.state:
        if b.result is not None and b.in_place:
            result_pointer[b.result] = state[b.symbol]
    for k, offset in m.temps.items():
        result_pointer[k] = ir.gep("%arena", offset)
    args = ir.value(f"alloca [{len(native.args)} x ptr], align 8")
    dims_out = None
    for position, a in enumerate(native.args):
        if a.kind == "input":
            kind, index = plan.operands[int(a.name)]
            pointer = inputs[index] if kind == "input" else state[index] if kind == "state" else \
                f"@{name}_weight{m.operand_constants[int(a.name)]}"
        elif a.kind == "constant":
            pointer = f"@{name}_weight{m.constants[a.name]}"
        elif a.kind == "output":
            pointer = result_pointer[int(a.name)]
        elif a.kind == "scratch":
            pointer = ir.gep("%arena", m.scratch_offset)
        elif a.kind == "dims" and a.name == "in":
            pointer = ir.value(f"alloca [{max(a.shape[0], 1)} x i64], align 8")
            k = 0
            for b in native.args:
                if b.kind != "input":
                    continue
                for d in b.dynamic:
                    kind, index = plan.operands[int(b.name)]
                    if kind != "input" or (index, d) not in dims:
                        raise LoweringError(f"to_library: method '{plan.name}': the code's input {b.name} has a "
                                            f"dynamic dim {d} that is no dynamic dim of a method input")
                    slot = ir.value(f"getelementptr inbounds i64, ptr {pointer}, {ix} {k}")
                    ir.emit(f"store i64 {dims[(index, d)]}, ptr {slot}, align 8")
                    k += 1
        elif a.kind == "dims" and a.name == "out":
            pointer = dims_out = ir.value(f"alloca [{max(a.shape[0], 1)} x i64], align 8")
        else:
            raise LoweringError(f"to_library: the code takes an argument of kind '{a.kind}' this library cannot pass")
        slot = ir.value(f"getelementptr inbounds ptr, ptr {args}, {ix} {position}")
        ir.emit(f"store ptr {pointer}, ptr {slot}, align {int(ix[1:]) // 8}")
    ir.emit(f"call void @{m.code_symbol}(ptr {args})")
    # After the call: state written by copy, outputs returned twice or returned inputs, output dims.
    for b in plan.state:
        if b.result is not None and not b.in_place:
            ir.emit(f"call void @llvm.memcpy.p0.p0.{ix}(ptr {state[b.symbol]}, ptr {result_pointer[b.result]}, "
                    f"{ix} {int(b.initial.nbytes)}, i1 false)")
    for p, (kind, k) in enumerate(plan.outputs):
        if kind == "result" and result_pointer[k] is not outputs[p] and result_pointer[k] != outputs[p]:
            size = to_ix(nbytes(plan.output_specs[p]))
            ir.emit(f"call void @llvm.memcpy.p0.p0.{ix}(ptr {outputs[p]}, ptr {result_pointer[k]}, {ix} {size}, "
                    "i1 false)")
        elif kind == "input":
            size = to_ix(nbytes(plan.inputs[k], k))
            ir.emit(f"call void @llvm.memmove.p0.p0.{ix}(ptr {outputs[p]}, ptr {inputs[k]}, {ix} {size}, i1 false)")
    code_dims_out = [(int(a.name), d) for a in native.args if a.kind == "output" for d in a.dynamic]
    for position, (p, d) in enumerate(m.output_dims):
        kind, k = plan.outputs[p]
        if kind == "input":
            value = dims[(k, d)]
        else:
            slot = ir.value(f"getelementptr inbounds i64, ptr {dims_out}, {ix} {code_dims_out.index((k, d))}")
            value = ir.value(f"load i64, ptr {slot}, align 8")
        slot = ir.value(f"getelementptr inbounds i32, ptr %output_dims, {ix} {position}")
        ir.emit(f"store i32 {ir.value(f'trunc i64 {value} to i32')}, ptr {slot}, align 4")
    ir.emit("ret i32 0")
    fails = []
    for code in sorted({c for c, _ in ERRORS.values()}):
        fails += [f"fail{code}:", f"  ret i32 {code}"]
    return "\n".join([f"define i32 @{m.symbol}({', '.join(params)}) {{", "entry:", *ir.lines, *fails, "}"]) + "\n"


def _expression_ir(ir: _Ir, expr: str, symbols: dict, method: str):
    """A derived size ("2*s0", "s0 + 1") as i64 IR over the known symbols, or None if one is unknown."""
    import ast

    ops = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "sdiv", ast.Mod: "srem"}

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return str(node.value)
        if isinstance(node, ast.Name):
            if node.id not in symbols:
                raise KeyError(node.id)
            return symbols[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ir.value(f"{ops[type(node.op)]} i64 {walk(node.left)}, {walk(node.right)}")
        raise LoweringError(f"to_library: method '{method}': the size expression '{expr}' is not supported")

    try:
        return walk(ast.parse(expr, mode="eval"))
    except KeyError:
        return None


def _init_ir(name: str, layout: ArenaLayout, ix: str) -> str:
    """`int NAME_init(void *arena)`: every mutable buffer to its initial value."""
    ir = _Ir(ix)
    if layout.state_bytes:
        ir.fail_if(ir.value("icmp eq ptr %arena, null"), ERRORS["NULL"][0])
        misaligned = ir.value(f"and {ix} {ir.address('%arena')}, {ARENA_ALIGN - 1}")
        ir.fail_if(ir.value(f"icmp ne {ix} {misaligned}, 0"), ERRORS["ALIGNMENT"][0])
    for (offset, nbytes, init) in layout.state.values():
        pointer = ir.gep("%arena", offset)
        if init is None:
            ir.emit(f"call void @llvm.memset.p0.{ix}(ptr {pointer}, i8 0, {ix} {nbytes}, i1 false)")
        else:
            ir.emit(f"call void @llvm.memcpy.p0.p0.{ix}(ptr {pointer}, ptr @{name}_weight{init}, {ix} {nbytes}, "
                    "i1 false)")
    ir.emit("ret i32 0")
    fails = [f"fail{c}:\n  ret i32 {c}" for c in (ERRORS["NULL"][0], ERRORS["ALIGNMENT"][0])]
    return "\n".join([f"define i32 @{name}_init(ptr %arena) {{", "entry:", *ir.lines, *fails, "}"]) + "\n"


def code_module(name: str, methods: list, layout: ArenaLayout, target: CpuTarget):
    """One LLVM module: every method's optimized code (its entry renamed NAME_M_code, internal) and the
    entry wrappers (optimized here at O2: written plainly, each check a branch)."""
    import llvmlite.binding as llvm

    from etc.targets.cpu.isa import init_llvm

    init_llvm()
    ix = f"i{target.index_bits}"
    lines = [f"declare void @{m.code_symbol}(ptr)" for m in methods]
    lines += [f"declare void @llvm.memcpy.p0.p0.{ix}(ptr, ptr, {ix}, i1)",
              f"declare void @llvm.memmove.p0.p0.{ix}(ptr, ptr, {ix}, i1)",
              f"declare void @llvm.memset.p0.{ix}(ptr, i8, {ix}, i1)"]
    lines += [f"@{name}_weight{k} = external hidden constant [{len(data)} x i8], align {WEIGHTS_ALIGN}"
              for k, data in enumerate(layout.weights)]
    text = "\n".join(lines) + "\n" + "".join(_entry_ir(m, layout, name, ix) for m in methods) + \
        _init_ir(name, layout, ix)
    tm = target_machine(target)
    try:
        module = llvm.parse_assembly(text)
    except RuntimeError as error:
        raise LoweringError(f"to_library: the entry wrappers are not valid LLVM IR: {error}") from None
    module.triple = target.triple
    module.data_layout = str(tm.target_data)
    module.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    for m in methods:
        code = llvm.parse_bitcode(m.native.bitcode)
        entry = code.get_function(m.native.entry)
        entry.name = m.code_symbol
        module.link_in(code)
        module.get_function(m.code_symbol).linkage = "internal"
    for fn in module.functions:  # only the entries are exported
        if not fn.is_declaration and fn.name not in {m.symbol for m in methods} | {f"{name}_init"}:
            fn.linkage = "internal"
    module.verify()
    return module


def weights_module(name: str, layout: ArenaLayout):
    """Every weight as `@NAME_weight<k>`: const bytes in section .rodata.etc_weights.NAME."""
    import llvmlite.binding as llvm

    lines = []
    for k, data in enumerate(layout.weights):
        lines.append(f"@{name}_weight{k} = hidden constant [{len(data)} x i8] {_bytes_literal(data)}, "
                     f"section \".rodata.etc_weights.{name}\", align {WEIGHTS_ALIGN}")
    return llvm.parse_assembly("\n".join(lines) + "\n")


_HEX = np.array([ord(c) for c in "0123456789ABCDEF"], dtype=np.uint8)


def _bytes_literal(data: bytes) -> str:
    """c"\\XX\\XX..." (every byte escaped: fast for megabytes, and any byte is fine)."""
    if not data:
        return "zeroinitializer"
    raw = np.frombuffer(data, dtype=np.uint8)
    text = np.empty((raw.size, 3), dtype=np.uint8)
    text[:, 0] = ord("\\")
    text[:, 1] = _HEX[raw >> 4]
    text[:, 2] = _HEX[raw & 15]
    return 'c"' + text.tobytes().decode("ascii") + '"'


def target_machine(target: CpuTarget):
    import llvmlite.binding as llvm

    try:
        llvm_target = llvm.Target.from_triple(target.triple)
    except RuntimeError as error:
        raise LoweringError(f"to_library: LLVM has no target for '{target.triple}': {error}") from None
    # Static addresses on bare metal (no GOT in the firmware); position-independent on Linux, so the
    # library also links into PIE executables and shared objects.
    reloc = "static" if bare_metal(target) else "pic"
    return llvm_target.create_target_machine(cpu=target.cpu, features=target.features, opt=3, reloc=reloc,
                                             codemodel="default")


def emit_object(module, target: CpuTarget, *, nounwind: bool) -> bytes:
    """The object of a copy of `module` (codegen changes the module it runs on). `nounwind`: the
    functions cannot unwind (C callers; on Arm their EHABI entries are then EXIDX_CANTUNWIND, where
    unwindable ones would reference __aeabi_unwind_cpp_pr0 and pull the unwinder into firmware)."""
    import llvmlite.binding as llvm

    copy = llvm.parse_bitcode(module.as_bitcode())
    if nounwind:
        for fn in copy.functions:
            if not fn.is_declaration:
                fn.add_function_attribute("nounwind")
    return target_machine(target).emit_object(copy)
