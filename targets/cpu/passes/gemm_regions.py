"""etc-cpu-gemm-regions: define each GEMM kernel with its accumulator init and its epilogue.

A dispatch region is a contraction with what happens to its tile in registers: where the
accumulator starts (a constant fill, a broadcast bias, or the C operand) and the single
elementwise consumer that finishes it (folded batch norm, ReLU/ReLU6/GELU/SiLU, residual
add), so that the result is stored once instead of written by the kernel and then read and
written again by a second loop over memory.

After `etc-cpu-fuse-elementwise` has merged each contraction's consumer chain into one
`linalg.generic`, this pass takes every kernel call `etc-cpu-gemm-kernels` made
(`etc.cpu.gemm` on it) and:
  * reads the init from the call's C operand: `linalg.fill` of a constant, a broadcast
    (`linalg.broadcast`, or a generic that only broadcasts), or else C itself;
  * takes the call's one user when it is an elementwise `linalg.generic` whose operands the
    kernel's tile layout can read (`gemm_kernel.Layout`): its body moves into the kernel's epilogue
    and its other operands become kernel arguments;
  * defines the private kernel function (`gemm_kernel.kernel_function`) and calls it.
Every elementwise consumer is a decision: `epilogue -> fused`, or `second-pass` with the
reason it could not be (the delegation report prints it). A contraction whose result has
several users, or feeds a non-elementwise op, has no epilogue: its users read the stored tile.
"""

from __future__ import annotations

import math

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op, nested_ops
from etc.passes.pass_api import Pass, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.entry_args import entry_function
from etc.targets.cpu.ir_query import indexing_maps, iterator_types, walk
from etc.targets.cpu.kernels import gemm_kernel, gemm_match
from etc.targets.cpu.passes.gemm_kernels import TileOptions


def _broadcasts_result(consumer, lay) -> bool:
    """Does the elementwise `consumer` write more elements than the contraction's result has (it
    reads the result broadcast: squeeze-excitation's gate, one value per channel, times the
    feature map)?"""
    if len(consumer.results) != 1 or not isinstance(consumer.results[0].type, ir.RankedTensorType):
        return False
    rtype = ir.RankedTensorType(consumer.results[0].type)
    if not rtype.has_static_shape or any(d < 0 for d in lay.shape):
        return False
    return math.prod(rtype.shape) > math.prod(lay.shape)


def _used_dims(amap, shape) -> "list | None":
    """Per operand dimension, the loop dimension it reads (None for a constant-0 unit dimension);
    None when the map is neither."""
    used = []
    for e, size in zip(amap.results, shape):
        if isinstance(e, ir.AffineDimExpr):
            used.append(ir.AffineDimExpr(e).position)
        elif isinstance(e, ir.AffineConstantExpr) and ir.AffineConstantExpr(e).value == 0 and size == 1:
            used.append(None)
        else:
            return None
    return used


def _inside(value, op) -> bool:
    """Is `value` defined inside `op`'s regions?"""
    owner = value.owner
    current = owner.owner if isinstance(owner, ir.Block) else as_operation(owner)
    while current is not None:
        if current == op:
            return True
        current = current.parent
    return False


def _vectorizable(consumer) -> "str | None":
    """Why the consumer's body cannot run on vectors, or None. (A power's integer exponent must
    be a constant: etc-cpu-tile-gemm-kernels turns those into multiplications; LLVM's powi takes
    only a scalar exponent.)"""
    for inner in nested_ops(consumer):
        if inner.name in ("math.fpowi", "math.ipowi"):
            exponent = defining_op(inner.operands[1])
            if exponent is None or exponent.name != "arith.constant":
                return f"its body raises to a computed integer power ({inner.name})"
    return None


def _external_constants(consumer) -> "list | str":
    """The arith.constant ops outside `consumer` that its body reads, or why the body reads
    something else from outside."""
    found = []
    for inner in nested_ops(consumer):
        for v in inner.operands:
            if _inside(v, consumer):
                continue
            producer = defining_op(v)
            if producer is None or producer.name != "arith.constant":
                return "its body reads a value computed outside it"
            if producer not in found:
                found.append(producer)
    return found


@register_pass
class GemmRegions(Pass):
    """Define the GEMM kernels with their init and epilogue (see the module docstring)."""

    name = "etc-cpu-gemm-regions"
    summary = "Define each GEMM kernel with its accumulator init and its elementwise epilogue, in registers"

    Options = TileOptions

    def run(self, module_op) -> None:
        o = self.options
        cfg = o.kernel_config()
        entry = entry_function(module_op)
        body = module_op.regions[0].blocks[0]
        declarations = {ir.StringAttr(op.attributes["sym_name"]).value: op.operation for op in body.operations
                        if op.operation.name == "func.func"}
        fused = 0
        with module_op.context, ir.Location.unknown():
            for call in walk(entry, ("func.call",)):
                if gemm_match.GEMM_ATTR not in call.attributes:
                    continue
                try:
                    fused += self._define(module_op, cfg, call, declarations)
                except gemm_kernel.NotFusable as e:
                    raise self.error(f"{self.name}: {e}", at=call) from None
        self.count("epilogues fused", fused)

    # ------------------------------------------------------------------ one kernel
    def _define(self, module_op, cfg, call, declarations) -> int:
        from torch_mlir.dialects import func as func_d

        g = gemm_match.from_call(call)
        own = gemm_kernel.layout(g, cfg)
        name = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        tag = f"etc.{name}"
        extras: list = []  # (value, Extra)
        init = self._init(g, own, extras)
        reshape, consumer = self._consumer(call)
        lay, seen = own, None
        if consumer is not None and reshape is not None:
            kind = "expand" if reshape.name == "tensor.expand_shape" else "collapse"
            groups = [[int(ir.IntegerAttr(d).value) for d in ir.ArrayAttr(group)]
                      for group in ir.ArrayAttr(reshape.attributes["reassociation"])]
            seen = (kind, groups, tuple(ir.RankedTensorType(reshape.results[0].type).shape))
            try:
                lay = gemm_kernel.layout(g, cfg, seen)
            except gemm_kernel.NotFusable as e:
                decisions.record(consumer, "epilogue", "second-pass", str(e))
                consumer, seen = None, None
        inputs, arg_types, constants = ["acc"], ["f32", "f32"], []
        if consumer is not None:
            consumer, inputs, arg_types, constants = self._epilogue(consumer, reshape or call, lay, extras)
            if consumer is None:
                seen = None
        region = gemm_kernel.Region(init, [e for _, e in extras], inputs, arg_types, body=consumer is not None,
                             kc=gemm_match.kernel_kc(g, cfg))
        text = gemm_kernel.kernel_function(g, cfg, name, tag, region, seen)
        try:
            parsed = ir.Module.parse(text, module_op.context)
        except ir.MLIRError as e:
            raise self.error(f"{self.name}: building GEMM kernel {name} failed: {e}", at=call) from None
        fn = parsed.body.operations[0].operation
        fn.detach_from_parent()
        declaration = declarations.pop(name)
        module_op.regions[0].blocks[0].append(fn)
        declaration.erase()
        result_op = consumer if consumer is not None else call
        # At the consumer: its other operands (a residual branch computed after the
        # contraction) must dominate the call that now reads them.
        with ir.InsertionPoint(consumer if consumer is not None else call), call.location:
            new = func_d.CallOp([result_op.results[0].type], ir.FlatSymbolRefAttr.get(name),
                                [g.a, g.b] + [v for v, _ in extras])
        if consumer is not None:
            # the kernel's epilogue, and its leftover columns' when it has them (gemm_kernel.LEFTOVER)
            epilogues = [op for op in walk(fn, ("linalg.generic",))
                         if f"{tag}_epi" in op.attributes or f"{tag}_epi{gemm_kernel.LEFTOVER}" in op.attributes]
            for epilogue in epilogues[1:]:  # a copy of the consumer gives its body
                twin = consumer.clone(ip=ir.InsertionPoint(consumer))
                self._move_body(twin, epilogue, constants)
                twin.erase()
            self._move_body(consumer, epilogues[0], constants)
        result_op.results[0].replace_all_uses_with(new.results[0])
        if consumer is not None:
            consumer.erase()
            if reshape is not None:
                reshape.erase()
        call.erase()
        return int(consumer is not None)

    def _init(self, g, lay, extras: list) -> tuple:
        """Where the accumulator starts (gemm_kernel.Region.init); appends what it reads to `extras`."""
        c = g.c
        producer = defining_op(c)
        if producer is not None and producer.name == "linalg.fill":
            value = defining_op(producer.operands[0])
            if value is not None and value.name == "arith.constant":
                return ("fill", str(value.attributes["value"]))
        source = None
        if producer is not None and producer.name == "linalg.broadcast":
            dims = list(ir.DenseI64ArrayAttr(producer.attributes["dimensions"]))
            rank = ir.RankedTensorType(c.type).rank
            source = (producer.operands[0], [d for d in range(rank) if d not in dims])
        elif producer is not None and producer.name == "linalg.generic" and self._is_broadcast(producer):
            v = producer.operands[0]
            source = (v, _used_dims(indexing_maps(producer)[0], ir.RankedTensorType(v.type).shape))
        if source is not None:
            extra = gemm_kernel.Extra(source[0].type, source[1], lay.groups)
            try:
                gemm_kernel.check_extra(extra, lay)
                extras.append((source[0], extra))
                return ("broadcast", len(extras) - 1)
            except gemm_kernel.NotFusable:
                pass  # read C itself, as any other init
        extras.append((c, gemm_kernel.Extra(c.type, list(range(ir.RankedTensorType(c.type).rank)), lay.groups)))
        return ("copy", len(extras) - 1)

    @staticmethod
    def _is_broadcast(op) -> bool:
        """A generic that only broadcasts its one input into its output."""
        if len(op.operands) != 2 or len(op.results) != 1 or set(iterator_types(op)) != {"parallel"}:
            return False
        block = op.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]
        maps = indexing_maps(op)
        if len(ops) != 1 or ops[0].operands[0] != block.arguments[0] or not maps[1].is_permutation:
            return False
        return maps[1] == ir.AffineMap.get_identity(maps[1].n_dims) and \
            _used_dims(maps[0], ir.RankedTensorType(op.operands[0].type).shape) is not None

    @staticmethod
    def _consumer(call) -> tuple:
        """(a unit-dimension reshape in between or None, the elementwise consumer or None): the
        call's single user, seen through a reshape that is the result's single user."""
        def single_user(value):
            uses = list(value.uses)
            if len(uses) != 1:
                return None
            owner = uses[0].owner
            return as_operation(owner)

        user = single_user(call.results[0])
        reshape = None
        if user is not None and user.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            reshape, user = user, single_user(user.results[0])
        if user is None or user.name != "linalg.generic" or set(iterator_types(user)) != {"parallel"}:
            return None, None
        return reshape, user

    def _epilogue(self, consumer, producer, lay, extras: list):
        """(consumer or None, epilogue inputs, block argument types, outside constants) for the
        elementwise `consumer` of `producer`'s result."""
        if _broadcasts_result(consumer, lay):
            # Not an epilogue to finish in registers: the consumer's own pass reads the small
            # stored result (its tuned path; fused, the result would be computed once per element).
            decisions.record(consumer, "epilogue", "broadcast",
                             "the consumer broadcasts the result over a larger shape (a channel scale)")
            return None, ["acc"], ["f32", "f32"], []
        why = self._why_not(consumer, producer.results[0], lay)
        if isinstance(why, str):
            decisions.record(consumer, "epilogue", "second-pass", why)
            return None, ["acc"], ["f32", "f32"], []
        inputs, constants, new_extras = why
        start = len(extras)
        extras.extend(new_extras)
        inputs = [s if s == "acc" else s + start for s in inputs]
        block = consumer.regions[0].blocks[0]
        arg_types = [str(a.type) for a in block.arguments]
        decisions.record(consumer, "epilogue", "fused")
        return consumer, inputs, arg_types, constants

    def _why_not(self, consumer, result, lay):
        """(inputs, outside constants, extras) of a consumer the kernel can finish, or why not."""
        n_in = len(consumer.operands) - len(consumer.results)
        if len(consumer.results) != 1:
            return f"the consumer has {len(consumer.results)} results"
        rtype = ir.RankedTensorType(consumer.results[0].type)
        if list(rtype.shape) != list(lay.shape) or str(rtype.element_type) != "f32":
            return "the consumer's result is not the contraction's shape in f32"
        maps = indexing_maps(consumer)
        if maps[-1] != ir.AffineMap.get_identity(len(lay.shape)):
            return "the consumer writes its result permuted"
        block = consumer.regions[0].blocks[0]
        if list(block.arguments[n_in].uses):
            return "the consumer reads its output"
        inputs, new_extras = [], []
        for k in range(n_in):
            v = consumer.operands[k]
            if v == result:
                if maps[k] != ir.AffineMap.get_identity(len(lay.shape)):
                    return "the consumer reads the contraction's result permuted"
                inputs.append("acc")
                continue
            vtype = ir.RankedTensorType(v.type) if isinstance(v.type, ir.RankedTensorType) else None
            if vtype is None:
                return "the consumer reads a non-tensor operand"
            used = _used_dims(maps[k], vtype.shape)
            if used is None:
                return "the consumer indexes an operand by an affine expression"
            extra = gemm_kernel.Extra(v.type, used)
            try:
                gemm_kernel.check_extra(extra, lay)
            except gemm_kernel.NotFusable as e:
                return str(e)
            new_extras.append((v, extra))
            inputs.append(len(new_extras) - 1)
        why = _vectorizable(consumer)
        if why is not None:
            return why
        constants = _external_constants(consumer)
        if isinstance(constants, str):
            return constants
        return inputs, constants, new_extras

    @staticmethod
    def _move_body(consumer, epilogue, constants: list) -> None:
        """Move the consumer's body into the kernel's epilogue (block arguments match one to
        one); constants it read from outside are cloned in front of the epilogue."""
        src = consumer.regions[0].blocks[0]
        dst = epilogue.regions[0].blocks[0]
        dst_ops = [o.operation for o in dst.operations]
        dst_yield = dst_ops[-1]
        src_ops = [o.operation for o in src.operations]
        src_yield = src_ops[-1]
        clones = [(const, const.clone(ip=ir.InsertionPoint(epilogue))) for const in constants]
        for op in src_ops[:-1]:
            op.move_before(dst_yield)
        for a, b in zip(src.arguments, dst.arguments):
            a.replace_all_uses_with(b)
        yielded = src_yield.operands[0]
        dst_yield.operands[0] = yielded
        for inner in nested_ops(epilogue):
            for k, v in enumerate(inner.operands):
                producer = defining_op(v)
                for const, clone in clones:
                    if producer is not None and producer == const:
                        inner.operands[k] = clone.results[0]
