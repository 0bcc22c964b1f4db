"""etc-cpu-profile-regions: a cycle counter read between the entry's dispatch regions (profiled builds only).

Only in the pipeline of a delegate compiled with `CpuPartitioner(profile=True)` (compile spec
`profile=1`); without it the pass is not run and the code is what it always was. It runs once the
entry's top-level ops are loop nests (after `convert-linalg-to-loops` / `etc-cpu-split-threads`),
and splits the entry into regions:

- a region is one top-level op with effects (a GEMM kernel's tiled nest, a window kernel, a fused
  elementwise or reduction loop nest, a copy; in a threaded entry also a `tid == 0` block), with the
  barrier that follows it in a threaded entry (the region ends when every thread is done);
  index math and views between them go with the next region;
- consecutive regions sharing an edge op (a convolution's padding copy, its GEMM nest and the
  epilogue nest that applies its fused ReLU: the convolution's NameLoc is inside each) are one
  region (option `merge`); a region whose ops carry no edge op's location (a copy the
  bufferization added) joins the region before it.

The pass reads the counter (`llvm.readcyclecounter`: rdtsc on x86-64, CNTVCT_EL0 on AArch64) once at
the entry's start and once after each region, and stores the reads into a profile buffer of
`regions + 1` i64 (on thread 0 only, in a threaded entry: time on the calling thread around the
parallel region). So the regions tile the whole entry: their deltas add up to its time. The buffer is
one more scratch argument (`etc.cpu.arg = "scratch:<offset>"` after the other scratch buffers, before
the threaded ABI's (barrier, tid, nthreads)), appended to `etc.cpu.abi`, with `etc.cpu.scratch_bytes`
grown to hold it: the runtime's scratch buffer carries it, no ABI or blob change.

What each region computed is recorded on the module as

    etc.cpu.profile = {offset = <byte offset in scratch> : i64,
                       regions = [{name = "conv2d", nodes = ["conv2d", "relu"], sources = ["m.py:27"]}, ...]}

(`nodes`: the FX node names of the NameLocs inside, in order; `sources`: their `file:line`), so the
blob can map each region back to the partition's edge ops and the user's lines (`read_profile`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import as_operation
from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu.entry_args import ARG_ATTR, arg_attrs, entry_function, set_arg_attrs, update_function_type

PROFILE_ATTR = "etc.cpu.profile"
COUNTER_INTRINSIC = "llvm.readcyclecounter"
# Architectures whose user-mode cycle counter LLVM reads with `llvm.readcyclecounter` (x86-64: rdtsc,
# invariant on every CPU the x86-64-v2 baseline covers; AArch64: the virtual counter CNTVCT_EL0).
COUNTER_ARCHES = ("x86_64", "aarch64")


def _is_pure(op) -> bool:
    from etc.targets.cpu.parallel import PURE_PREFIXES

    return op.name.startswith(PURE_PREFIXES)


def _is_barrier(op) -> bool:
    from etc.targets.cpu.parallel import BARRIER_FN

    return op.name == "func.call" and ir.FlatSymbolRefAttr(op.attributes["callee"]).value == BARRIER_FN


def _name_locs(location, out: dict) -> None:
    """The NameLocs inside `location` (the FX nodes an op came from) -> their `file:line` (or None)."""
    if isinstance(location, ir.NameLoc):
        child = location.child_loc
        source = None
        if isinstance(child, ir.FileLineColLoc):
            source = f"{os.path.basename(child.filename)}:{child.start_line}"
        out.setdefault(location.name_str, source)
    elif isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            _name_locs(inner, out)
    elif isinstance(location, ir.CallSiteLoc):  # a kernel's body inlined at the edge op's call: both
        _name_locs(location.callee, out)
        _name_locs(location.caller, out)


def region_nodes(op) -> dict:
    """FX node name -> `file:line` of every op at or under `op`, in walk order."""
    found: dict = {}

    def visit(inner):
        _name_locs(inner.location, found)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


@register_pass
class ProfileRegions(Pass):
    """Counter reads between the entry's dispatch regions into a scratch profile buffer (module docstring)."""

    name = "etc-cpu-profile-regions"
    summary = "Read the cycle counter between the entry's top-level loop nests into a profile buffer (profiled builds)"

    @dataclass
    class Options:
        merge: bool = option(True, help="one region for consecutive nests sharing an edge op")

    def run(self, module_op) -> None:
        from etc.targets.cpu.parallel import insertion_after
        from etc.targets.cpu.passes.entry_abi import ABI_ATTR
        from etc.targets.cpu.passes.plan_scratch import SCRATCH_ATTR

        fn = entry_function(module_op)
        if ABI_ATTR not in module_op.attributes:
            raise self.error(f"{self.name}: the module has no {ABI_ATTR} (run after etc-cpu-entry-abi)", at=fn)
        if PROFILE_ATTR in module_op.attributes:
            raise self.error(f"{self.name}: the entry is already profiled", at=fn)
        block = fn.regions[0].blocks[0]
        ops = [op.operation for op in block.operations]
        if any(op.name.startswith("linalg.") for op in ops):
            raise self.error(f"{self.name}: the entry still has linalg ops (run after the loops are lowered)", at=fn)
        regions = self._regions(ops)
        threaded = "etc.cpu.threaded" in fn.attributes
        with fn.context, ir.Location.unknown():
            i64 = ir.IntegerType.get_signless(64)
            scratch = ir.IntegerAttr(module_op.attributes[SCRATCH_ATTR]).value if SCRATCH_ATTR in \
                module_op.attributes else 0
            offset = (scratch + 63) // 64 * 64
            buffer = self._add_buffer(fn, ir.MemRefType.get([len(regions) + 1], i64), offset, threaded)
            tid = block.arguments[len(block.arguments) - 2] if threaded else None
            self._read_into(buffer, 0, ir.InsertionPoint.at_block_begin(block), tid)
            for k, region in enumerate(regions):
                # After the region's last op (never the terminator); an empty entry: before the return.
                at = insertion_after(region["last"]) if region["last"] is not None else ir.InsertionPoint(ops[-1])
                self._read_into(buffer, k + 1, at, tid)
            # The ABI and the scratch size the blob records (entry-abi wrote them before the loops).
            abi = list(ir.ArrayAttr(module_op.attributes[ABI_ATTR]))
            abi.append(ir.DictAttr.get({"kind": ir.StringAttr.get("scratch"), "name": ir.StringAttr.get("scratch"),
                                        "dtype": ir.StringAttr.get("uint8"),
                                        "shape": ir.DenseI64ArrayAttr.get([offset])}))
            module_op.attributes[ABI_ATTR] = ir.ArrayAttr.get(abi)
            total = ir.IntegerAttr.get(i64, (offset + 8 * (len(regions) + 1) + 63) // 64 * 64)
            module_op.attributes[SCRATCH_ATTR] = total
            fn.attributes[SCRATCH_ATTR] = total
            module_op.attributes[PROFILE_ATTR] = ir.DictAttr.get({
                "offset": ir.IntegerAttr.get(i64, offset),
                "regions": ir.ArrayAttr.get([ir.DictAttr.get({
                    "name": ir.StringAttr.get(region["name"]),
                    "nodes": ir.ArrayAttr.get([ir.StringAttr.get(n) for n in region["nodes"]]),
                    "sources": ir.ArrayAttr.get([ir.StringAttr.get(s) for s in
                                                 dict.fromkeys(s for s in region["nodes"].values() if s)]),
                }) for region in regions])})
        self.count("regions", len(regions))

    # ------------------------------------------------------------------ regions
    def _regions(self, ops: list) -> list[dict]:
        """[{last: op, nodes: {node: source}, name}] in order (see the module docstring)."""
        regions: list[dict] = []
        for op in ops:
            if op.name == "func.return":
                break
            if _is_barrier(op) and regions:
                regions[-1]["last"] = op
                continue
            if _is_pure(op):
                continue
            nodes = region_nodes(op)
            last = regions[-1] if regions else None
            if last is not None and (not nodes or self.options.merge and not set(nodes).isdisjoint(last["nodes"])):
                last["last"] = op
                for node, source in nodes.items():
                    last["nodes"].setdefault(node, source)
                continue
            regions.append({"last": op, "nodes": nodes})
        if not regions:  # nothing but views: one (empty) region, read before the return
            regions.append({"last": None, "nodes": {}})
        seen: dict = {}
        for region in regions:
            nodes = list(region["nodes"])
            base = (nodes[0] + (f" +{len(nodes) - 1}" if len(nodes) > 1 else "")) if nodes else \
                "copy" if region["last"] is not None else "entry"
            seen[base] = seen.get(base, 0) + 1
            region["name"] = base if seen[base] == 1 else f"{base} #{seen[base]}"
        return regions

    # ------------------------------------------------------------------ IR
    @staticmethod
    def _add_buffer(fn, buffer_type, offset: int, threaded: bool):
        """The profile buffer: a new scratch argument after the others, before (barrier, tid, nthreads)."""
        block = fn.regions[0].blocks[0]
        attrs = arg_attrs(fn)
        label = {ARG_ATTR: ir.StringAttr.get(f"scratch:{offset}"), "llvm.noalias": ir.UnitAttr.get()}
        if not threaded:
            buffer = block.add_argument(buffer_type, ir.Location.unknown())
            attrs.append(label)
        else:
            # Block arguments can only be appended: re-append the threaded three after the buffer.
            n = len(block.arguments)
            old = [block.arguments[i] for i in range(n - 3, n)]
            buffer = block.add_argument(buffer_type, ir.Location.unknown())
            for value in old:
                value.replace_all_uses_with(block.add_argument(value.type, ir.Location.unknown()))
            for i in reversed(range(n - 3, n)):
                block.erase_argument(i)
            attrs = attrs[:n - 3] + [label] + attrs[n - 3:n]
        update_function_type(fn)
        set_arg_attrs(fn, attrs)
        return buffer

    @staticmethod
    def _read_into(buffer, slot: int, point, tid) -> None:
        """At `point`: read the counter and store it into `buffer[slot]` (on thread 0 when threaded)."""
        from torch_mlir.dialects import arith, llvm, memref, scf

        with point:
            index = ir.IndexType.get()
            value = llvm.CallIntrinsicOp(ir.IntegerType.get_signless(64), COUNTER_INTRINSIC, [], [], []).result
            where = arith.ConstantOp(index, slot).result
            if tid is None:
                memref.StoreOp(value, buffer, [where])
                return
            first = arith.CmpIOp(arith.CmpIPredicate.eq, tid, arith.ConstantOp(index, 0).result).result
            guard = scf.IfOp(first)
            with ir.InsertionPoint(guard.then_block):
                memref.StoreOp(value, buffer, [where])
                scf.YieldOp([])


def read_profile(module) -> dict | None:
    """`etc.cpu.profile` as {offset, regions: [{name, nodes, sources}]}, or None for an unprofiled module."""
    op = as_operation(module)
    if PROFILE_ATTR not in op.attributes:
        return None
    d = ir.DictAttr(op.attributes[PROFILE_ATTR])
    regions = []
    for entry in ir.ArrayAttr(d["regions"]):
        r = ir.DictAttr(entry)
        regions.append({"name": ir.StringAttr(r["name"]).value,
                        "nodes": [ir.StringAttr(n).value for n in ir.ArrayAttr(r["nodes"])],
                        "sources": [ir.StringAttr(s).value for s in ir.ArrayAttr(r["sources"])]})
    return {"offset": ir.IntegerAttr(d["offset"]).value, "regions": regions}


def relocate_like(original, copy) -> None:
    """Give every op of `copy` (a re-parse of `original` in another context, which lost its locations)
    the location of its counterpart in `original`, so the NameLocs of the user's nodes reach the
    regions this pass finds."""
    pairs: list = []
    ours: list = []
    original.walk(lambda op: (pairs.append(op.location), ir.WalkResult.ADVANCE)[1])
    copy.walk(lambda op: (ours.append(op), ir.WalkResult.ADVANCE)[1])
    if len(pairs) != len(ours):
        from etc.errors import LoweringError

        raise LoweringError(f"cpu profile: the re-parsed delegate has {len(ours)} ops, its original {len(pairs)}")
    with copy.context:
        for op, location in zip(ours, pairs):
            op.location = _rebuild(location)


def _rebuild(location) -> ir.Location:
    """`location` (of another context) in the current one: NameLoc, FileLineColLoc, FusedLoc, CallSiteLoc."""
    if isinstance(location, ir.NameLoc):
        return ir.Location.name(location.name_str, childLoc=_rebuild(location.child_loc))
    if isinstance(location, ir.FileLineColLoc):
        return ir.Location.file(location.filename, location.start_line, location.start_col)
    if isinstance(location, ir.FusedLoc):
        return ir.Location.fused([_rebuild(inner) for inner in location.locations])
    if isinstance(location, ir.CallSiteLoc):
        return ir.Location.callsite(_rebuild(location.callee), [_rebuild(location.caller)])
    return ir.Location.unknown()


def partition_op_indices(func_op) -> dict:
    """FX node name -> index of the partition op (top-level, in order; func.return, constant loads and
    arith.constant left out, as the compile record lists a delegate's ops) it belongs to."""
    out: dict = {}
    index = 0
    for op in func_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in ("func.return", "ml_program.global_load_const", "arith.constant"):
            continue
        for node in region_nodes(op):
            out.setdefault(node, index)
        index += 1
    return out
