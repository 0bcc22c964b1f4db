"""A standalone path for the kernel strategy: linalg-on-tensors text -> strategy -> bufferize -> LLVM ->
llvmlite MCJIT, called through ctypes with numpy arrays (tests and `tools/bench_gemm.py`).

    k = compile_linalg_text(MLIR, strategy="vector")      # one func, static f32 tensors
    out = k(a, b)                                          # numpy in, numpy out (results as out-params)

Same ABI as the cpu target (bare pointers, results written into caller buffers), but its own short
pipeline so that the strategy can be measured and tested without the rest of the target.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
from torch_mlir import ir
from torch_mlir.passmanager import PassManager

from etc.errors import LoweringError
from etc.targets.cpu import kernels_strategy as ks

BUFFERIZE = ("builtin.module(one-shot-bufferize{bufferize-function-boundaries "
             "function-boundary-type-conversion=identity-layout-map}, "
             "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true}, "
             "canonicalize, cse)")

TO_LLVM = ("builtin.module(func.func(convert-linalg-to-loops), " + ks.VECTOR_LOWERING + ", lower-affine, "
           "canonicalize, convert-scf-to-cf, expand-strided-metadata, lower-affine, convert-math-to-llvm, "
           "convert-math-to-libm, finalize-memref-to-llvm, convert-arith-to-llvm, convert-cf-to-llvm, "
           "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1}, convert-ub-to-llvm, "
           "reconcile-unrealized-casts, canonicalize)")

_ENGINES = []  # MCJIT engines must outlive the functions they hold
_LOCK = threading.Lock()


def _run(module, pipeline: str, what: str) -> None:
    try:
        PassManager.parse(pipeline, context=module.context).run(module.operation)
    except Exception as e:  # noqa: BLE001
        raise LoweringError(f"gemm path: {what} failed: {e}") from None


def _llvm():
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


def host_target():
    from etc.targets.cpu.codegen import host_target as ht

    return ht()


class Kernel:
    """A compiled function: call with input arrays, returns the output arrays (new or given via out=)."""

    def __init__(self, fn, in_types, out_types, mlir_after_strategy: str, asm: str, scratch=()):
        self._fn = fn
        self._scratch = np.zeros(scratch[-1] + 64, np.uint8) if scratch else None
        base = 0 if self._scratch is None else (-self._scratch.ctypes.data) % 64
        self._scratch_ptrs = [] if self._scratch is None else \
            [self._scratch.ctypes.data + base + off for off in scratch[:-1]]
        self.in_types = in_types
        self.out_types = out_types
        self.mlir = mlir_after_strategy
        self.asm = asm

    def __call__(self, *inputs, out=None):
        if len(inputs) != len(self.in_types):
            raise TypeError(f"expected {len(self.in_types)} inputs, got {len(inputs)}")
        arrays = []
        for x, (shape, dt) in zip(inputs, self.in_types):
            x = np.ascontiguousarray(x, dtype=dt)
            if x.shape != shape:
                raise ValueError(f"input shape {x.shape}, expected {shape}")
            arrays.append(x)
        outs = out if out is not None else [np.empty(s, dt) for s, dt in self.out_types]
        self._fn(*[a.ctypes.data for a in arrays], *[o.ctypes.data for o in outs], *self._scratch_ptrs)
        return outs[0] if len(outs) == 1 and out is None else outs


def _types(fn):
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)

    def conv(t):
        rt = ir.RankedTensorType(t)
        from etc.targets.cpu.codegen import numpy_dtype_of

        return tuple(rt.shape), np.dtype(numpy_dtype_of(rt.element_type))

    return [conv(t) for t in ftype.inputs], [conv(t) for t in ftype.results]


def compile_module(module: ir.Module, *, strategy: str = "vector", target=None, opt_level: int = 3) -> Kernel:
    """`strategy`: "vector" (kernels_strategy's own phases, then the default for the rest), "hook"
    (the cpu target's hook, as codegen calls it), "default" (the target's default only) or "none"."""
    from torch_mlir.dialects import llvm as llvm_d

    from etc.targets.cpu import codegen

    target = target or host_target()
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise LoweringError("gemm path: expected one func")
    fn = funcs[0]
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    in_types, out_types = _types(fn)
    _run(module, codegen.FUSION, "elementwise fusion")
    if strategy == "vector":
        ks.apply_kernel_strategy(module, target)
        codegen.default_codegen_strategy(module, target)
    elif strategy == "hook":  # what the cpu target runs (kernels_strategy.apply_codegen_strategy)
        ks.apply_codegen_strategy(module, target)
    elif strategy == "default":
        codegen.default_codegen_strategy(module, target)
    after = str(module)
    _run(module, BUFFERIZE, "bufferization")
    ks.remove_self_copies(module)
    ks.forward_result_copies(module)
    scratch = codegen.plan_scratch(module)  # temporaries -> trailing arguments (no malloc)
    codegen.copies_to_linalg(module)
    _run(module, TO_LLVM, "lowering to LLVM")
    text = llvm_d.translate_module_to_llvmir(module.operation)
    text = codegen._strip_header(text)
    llvm = _llvm()
    tm = llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu, features=target.features, opt=opt_level, reloc="pic", codemodel="default")
    mod = llvm.parse_assembly(text)
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    codegen.check_external_symbols(mod)
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    asm = tm.emit_assembly(mod)
    obj = tm.emit_object(mod)
    with _LOCK:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addr = engine.get_function_address(name)
        _ENGINES.append(engine)
    if not addr:
        raise LoweringError(f"gemm path: symbol {name} not found")
    n_scratch = max(0, len(scratch) - 1)
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (len(in_types) + len(out_types) + n_scratch)))
    return Kernel(proto(addr), in_types, out_types, after, asm, scratch)


def compile_linalg_text(text: str, **kw) -> Kernel:
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        return compile_module(module, **kw)


# ----------------------------------------------------------- IR generators
def matmul_ir(m: int, n: int, k: int, *, bias: bool = False, relu: bool = False, batch: int = 0) -> str:
    """`func @mm(a, b[, bias]) -> c`: c = a @ b (+ bias over columns) (relu), f32."""
    bshape = f"{batch}x" if batch else ""
    a_t, b_t, c_t = (f"tensor<{bshape}{m}x{k}xf32>", f"tensor<{bshape}{k}x{n}xf32>", f"tensor<{bshape}{m}x{n}xf32>")
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    args = f"%a: {a_t}, %b: {b_t}" + (f", %bias: tensor<{n}xf32>" if bias else "")
    lines = [f"func.func @mm({args}) -> {c_t} {{",
             "  %z = arith.constant 0.0 : f32",
             f"  %e = tensor.empty() : {c_t}",
             f"  %f = linalg.fill ins(%z : f32) outs(%e : {c_t}) -> {c_t}",
             f"  %r = {op} ins(%a, %b : {a_t}, {b_t}) outs(%f : {c_t}) -> {c_t}"]
    result = "%r"
    if bias or relu:
        rank = 3 if batch else 2
        dims = ", ".join(f"d{i}" for i in range(rank))
        ident = f"affine_map<({dims}) -> ({dims})>"
        maps = [ident] + ([f"affine_map<({dims}) -> (d{rank - 1})>"] if bias else []) + [ident]
        ins = "%r" + (", %bias" if bias else "")
        in_types = c_t + (f", tensor<{n}xf32>" if bias else "")
        iters = ", ".join(['"parallel"'] * rank)
        block_args = "%x: f32" + (", %y: f32" if bias else "") + ", %o: f32"
        body = []
        v = "%x"
        if bias:
            body.append("    %s = arith.addf %x, %y : f32")
            v = "%s"
        if relu:
            body.append(f"    %u = arith.maximumf {v}, %z : f32")
            v = "%u"
        lines += [f"  %g = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
                  f"iterator_types = [{iters}]}} ins({ins} : {in_types}) "
                  f"outs(%e : {c_t}) {{",
                  f"  ^bb0({block_args}):", *body, f"    linalg.yield {v} : f32", f"  }} -> {c_t}"]
        result = "%g"
    lines += [f"  return {result} : {c_t}", "}"]
    return "\n".join(lines) + "\n"


def conv_ir(n: int, c: int, h: int, w: int, f: int, kh: int, kw: int, *, stride: int = 1, pad: int = 0,
            layout: str = "nchw", depthwise: bool = False, relu: bool = False) -> str:
    """`func @conv(x, w) -> y` with zero padding, f32. nchw: x NCHW, w FCHW (depthwise: CHW);
    nhwc: x NHWC, w HWCF (depthwise: HWC)."""
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kw) // stride + 1
    hp, wp = h + 2 * pad, w + 2 * pad
    fo = c if depthwise else f
    if layout == "nchw":
        x_t, xp_t, y_t = (f"tensor<{n}x{c}x{h}x{w}xf32>", f"tensor<{n}x{c}x{hp}x{wp}xf32>",
                          f"tensor<{n}x{fo}x{oh}x{ow}xf32>")
        w_t = f"tensor<{c}x{kh}x{kw}xf32>" if depthwise else f"tensor<{f}x{c}x{kh}x{kw}xf32>"
        low, high = f"[0, 0, {pad}, {pad}]", f"[0, 0, {pad}, {pad}]"
        op = "linalg.depthwise_conv_2d_nchw_chw" if depthwise else "linalg.conv_2d_nchw_fchw"
    else:
        x_t, xp_t, y_t = (f"tensor<{n}x{h}x{w}x{c}xf32>", f"tensor<{n}x{hp}x{wp}x{c}xf32>",
                          f"tensor<{n}x{oh}x{ow}x{fo}xf32>")
        w_t = f"tensor<{kh}x{kw}x{c}xf32>" if depthwise else f"tensor<{kh}x{kw}x{c}x{f}xf32>"
        low, high = f"[0, {pad}, {pad}, 0]", f"[0, {pad}, {pad}, 0]"
        op = "linalg.depthwise_conv_2d_nhwc_hwc" if depthwise else "linalg.conv_2d_nhwc_hwcf"
    lines = [f"func.func @conv(%x: {x_t}, %w: {w_t}) -> {y_t} {{",
             "  %z = arith.constant 0.0 : f32"]
    src = "%x"
    if pad:
        lines += [f"  %p = tensor.pad %x low{low} high{high} {{",
                  "  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):",
                  "    tensor.yield %z : f32", f"  }} : {x_t} to {xp_t}"]
        src = "%p"
    lines += [f"  %e = tensor.empty() : {y_t}",
              f"  %f = linalg.fill ins(%z : f32) outs(%e : {y_t}) -> {y_t}",
              f"  %r = {op} {{dilations = dense<1> : tensor<2xi64>, strides = dense<{stride}> : tensor<2xi64>}} "
              f"ins({src}, %w : {xp_t}, {w_t}) outs(%f : {y_t}) -> {y_t}"]
    result = "%r"
    if relu:
        ident = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
        lines += [f"  %g = linalg.generic {{indexing_maps = [{ident}, {ident}], iterator_types = "
                  f"[\"parallel\", \"parallel\", \"parallel\", \"parallel\"]}} ins(%r : {y_t}) outs(%e : {y_t}) {{",
                  "  ^bb0(%v: f32, %o: f32):", "    %u = arith.maximumf %v, %z : f32",
                  "    linalg.yield %u : f32", f"  }} -> {y_t}"]
        result = "%g"
    lines += [f"  return {result} : {y_t}", "}"]
    return "\n".join(lines) + "\n"


def pool_ir(n: int, c: int, h: int, w: int, k: int, *, stride: int = 1, kind: str = "max",
            layout: str = "nchw") -> str:
    """`func @pool(x) -> y`: k x k max or sum pooling without padding, f32."""
    oh = (h - k) // stride + 1
    ow = (w - k) // stride + 1
    x_t = f"tensor<{n}x{c}x{h}x{w}xf32>" if layout == "nchw" else f"tensor<{n}x{h}x{w}x{c}xf32>"
    y_t = f"tensor<{n}x{c}x{oh}x{ow}xf32>" if layout == "nchw" else f"tensor<{n}x{oh}x{ow}x{c}xf32>"
    init = "0xFF800000" if kind == "max" else "0.0"
    return "\n".join([
        f"func.func @pool(%x: {x_t}) -> {y_t} {{",
        f"  %i = arith.constant {init} : f32",
        f"  %e = tensor.empty() : {y_t}",
        f"  %f = linalg.fill ins(%i : f32) outs(%e : {y_t}) -> {y_t}",
        f"  %win = tensor.empty() : tensor<{k}x{k}xf32>",
        f"  %r = linalg.pooling_{layout}_{kind} {{dilations = dense<1> : tensor<2xi64>, "
        f"strides = dense<{stride}> : tensor<2xi64>}} ins(%x, %win : {x_t}, tensor<{k}x{k}xf32>) "
        f"outs(%f : {y_t}) -> {y_t}",
        f"  return %r : {y_t}", "}"]) + "\n"
