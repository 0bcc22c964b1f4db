"""One pass measured alone, for bench/windows.py and the window-kernel tests: a torch module -> the
linalg-on-tensors function the cpu target sees -> `etc-cpu-window-kernels` (with the options under
test) -> a JIT-compiled callable, through a short upstream lowering rather than the whole cpu
pipeline, so that what is timed is the pass's kernel."""

from __future__ import annotations

def linalg_of(model, x):
    """(linalg text, pipeline.Lowered) of `model(x)` as the cpu target lowers it (edge program ->
    torch-mlir -> linalg on tensors; batch norm folded into the convolution by etc-fuse-batch-norm)."""
    import torch

    import etc
    from etc.targets.cpu.pipeline import lower_to_linalg

    ep = torch.export.export(model.eval(), (x,))
    program_ir = etc.to_edge(ep).program_ir
    fn = [op for op in program_ir.module.body.operations if op.operation.name == "func.func"][0]
    lowered = lower_to_linalg(fn, program_ir.constants)
    return str(lowered.module), lowered


def run_window_pass(text: str, options: str = "") -> str:
    """`text` after `builtin.module(func.func(etc-cpu-window-kernels{options}))`."""
    from torch_mlir import ir

    from etc.passes.pipeline import run_pipeline

    with ir.Context():
        module = ir.Module.parse(text)
        run_pipeline(module, f"builtin.module(func.func(etc-cpu-window-kernels{options}))")
        return str(module)


BUFFERIZE = ("builtin.module(func.func(linalg-generalize-named-ops), one-shot-bufferize{bufferize-function-boundaries "
             "function-boundary-type-conversion=identity-layout-map}, canonicalize, "
             "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true}, canonicalize, cse)")
TO_LLVM = ("builtin.module(func.func(convert-linalg-to-loops), lower-affine, "
           "func.func(convert-vector-to-scf{full-unroll=true}, lower-affine), convert-vector-to-llvm, canonicalize, "
           "convert-scf-to-cf, expand-strided-metadata, lower-affine, convert-math-to-llvm, "
           "finalize-memref-to-llvm, convert-arith-to-llvm, convert-cf-to-llvm, "
           "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1}, convert-ub-to-llvm, reconcile-unrealized-casts, "
           "canonicalize)")


def _walk(op, name: str) -> list:
    from torch_mlir import ir

    found = []

    def visit(inner):
        if inner.name == name:
            found.append(inner)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _copies_to_linalg(module) -> None:
    """memref.copy (of a strided view: a call to the runtime's memrefCopy) -> linalg.copy (loops)."""
    from torch_mlir import ir
    from torch_mlir.dialects import linalg

    for copy in _walk(module.operation, "memref.copy"):
        with ir.InsertionPoint(copy), copy.location:
            linalg.copy(copy.operands[0], outs=[copy.operands[1]])
        copy.erase()


def _hoist_allocs(fn) -> list:
    """Every static memref.alloc becomes a trailing argument (caller-owned scratch); their shapes."""
    import numpy as np
    from torch_mlir import ir

    allocs = _walk(fn.operation, "memref.alloc")
    block = fn.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    inputs, shapes = list(ftype.inputs), []
    for op in allocs:
        t = ir.MemRefType(op.result.type)
        plain = ir.MemRefType.get(t.shape, t.element_type)
        inputs.append(plain)
        op.result.replace_all_uses_with(block.add_argument(plain, ir.Location.unknown()))
        op.erase()
        shapes.append((tuple(t.shape), np.float32 if str(t.element_type) == "f32" else np.uint8))
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, list(ftype.results)))
    return shapes


class Compiled:
    """A JIT-compiled one-function module: `call(*inputs, outputs=None) -> outputs` (f32 numpy)."""

    def __init__(self, engine, address, in_shapes, out_shapes, scratch):
        import ctypes

        import numpy as np

        self._engine = engine
        n = len(in_shapes) + len(out_shapes) + len(scratch)
        self._fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * n)(address)
        self.in_shapes, self.out_shapes = in_shapes, out_shapes
        self._scratch = [np.zeros(s, d) for s, d in scratch]

    def __call__(self, *inputs, outputs=None):
        import numpy as np

        ins = [np.ascontiguousarray(x, dtype=np.float32) for x in inputs]
        outs = outputs if outputs is not None else [np.empty(s, np.float32) for s in self.out_shapes]
        self._fn(*[x.ctypes.data for x in ins], *[o.ctypes.data for o in outs], *[b.ctypes.data for b in self._scratch])
        return outs


def _for_llvmlite(text: str) -> str:
    """MLIR's LLVM 24 IR text in the syntax of llvmlite's older LLVM (float literals, header): the
    cpu target's own converter."""
    from etc.targets.cpu.codegen import strip_header

    return strip_header(text)


def compile_linalg_text(text: str, opt_level: int = 3) -> Compiled:
    """linalg-on-tensors text (one public func, static f32 tensors; vector ops allowed) -> native code
    for the host through bufferization, the upstream lowering to the LLVM dialect and llvmlite."""
    import llvmlite.binding as llvm
    from torch_mlir import ir
    from torch_mlir.dialects import llvm as llvm_d
    from torch_mlir.passmanager import PassManager

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        fn = [op for op in module.body.operations if op.operation.name == "func.func"][0]
        name = ir.StringAttr(fn.attributes["sym_name"]).value
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        in_shapes = [tuple(ir.RankedTensorType(t).shape) for t in ftype.inputs]
        out_shapes = [tuple(ir.RankedTensorType(t).shape) for t in ftype.results]
        PassManager.parse(BUFFERIZE).run(module.operation)
        _copies_to_linalg(module)
        scratch = _hoist_allocs(fn)
        n = len(fn.regions[0].blocks[0].arguments)
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get({"llvm.noalias": ir.UnitAttr.get()})] * n)
        PassManager.parse(TO_LLVM).run(module.operation)
        llvm_ir = llvm_d.translate_module_to_llvmir(module.operation)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(_for_llvmlite(str(llvm_ir)))
    triple = llvm.get_process_triple()
    features = llvm.get_host_cpu_features().flatten()
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=llvm.get_host_cpu_name(), features=features,
                                                               opt=opt_level)
    mod.triple = triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    return Compiled(engine, engine.get_function_address(name), in_shapes, out_shapes, scratch)


def compile_model(model, x, options: str = ""):
    """(callable, [inputs as numpy], pass output text) for `model` on example `x`."""
    text, lowered = linalg_of(model, x)
    rewritten = run_window_pass(text, options)
    fn = compile_linalg_text(rewritten)
    args = [x.numpy()] + [lowered.constants[name] for kind, name in lowered.arguments[1:]]
    return fn, args, rewritten
