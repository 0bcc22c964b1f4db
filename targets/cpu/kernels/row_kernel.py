"""The row kernel: one loop nest over a group's rows, a few vector passes over each row held in L1.

`Kernel(group).function(name)` writes the text of a `row_match.Group` as a function (arguments: the
tensor inputs, then the captured scalars; results: the group's used results). `plan` assigns each
reduction to the pass that accumulates it and each output to the pass that writes it, and decides
which elementwise values a later pass recomputes and which it keeps in the row of an output;
`emit_pass` walks the row in `lanes`-wide vectors, `unroll` of them per step with their own
accumulators, the row's last partial vector masked (its lanes contribute the reduction's
identity). The whole story is `passes/row_kernels.py`'s docstring.
"""

from __future__ import annotations

import math

from torch_mlir import ir

from etc.targets.cpu.kernel_ir import KernelText, scalar_literal, tensor_type, vector_type
from etc.targets.cpu.kernels.row_match import COMBINERS, Group, Node
from etc.targets.cpu.parallel import THREAD_SPLIT


class Kernel:
    """The text of a group's kernel as a function (arguments: tensor inputs then captured scalars;
    results: the group's used results in their own types)."""

    def __init__(self, group: Group):
        self.g = group
        self.w = KernelText(indent=0)
        self.top = self.w.section()  # uniform values, before the loops
        self.memo: dict = {}  # (node, copy) -> SSA name (scoped by `self.scopes`)
        self.scopes: list = [set()]
        self.ivs: list = []
        self.tensors: dict = {}  # output index -> current SSA name of its tensor

    # -- small helpers
    def index(self, v: int) -> str:
        return self.w.index(v)

    def lookup(self, key):
        return self.memo.get(key)

    def remember(self, key, name):
        self.memo[key] = name
        self.scopes[-1].add(key)

    def push(self):
        self.scopes.append(set())

    def pop(self):
        for key in self.scopes.pop():
            self.memo.pop(key, None)

    def splat(self, scalar: str, elem: str, width: int) -> str:
        v = self.w.fresh("s")
        self.w.emit(f"{v} = vector.broadcast {scalar} : {elem} to {vector_type(width, elem)}")
        return v

    # -- values
    def scalar(self, node: Node) -> str:
        """A uniform or per-row node's scalar SSA name."""
        key = (node, None)
        found = self.lookup(key)
        if found is not None:
            return found
        if node.kind == "reduce":
            raise AssertionError("a reduction read before its pass")
        w = self.top if node.shape == "uniform" else self.w
        name = w.fresh("u" if node.shape == "uniform" else "r")
        g = self.g
        if node.kind == "const":
            w.emit(f"{name} = arith.constant {node.text}")
        elif node.kind == "arg":
            name = f"%a{node.input}"
        elif node.kind == "extract":
            value, role = g.inputs[node.input]
            idx = ", ".join(self.ivs[i] for i in role.outer)
            w.emit(f"{name} = tensor.extract %t{node.input}[{idx}] : {self.view_type(node.input)}")
        elif node.kind == "op":
            args = [self.scalar(a) for a in node.operands]
            types = [a.type for a in node.operands]
            attrs = f" {{{node.attrs}}}" if node.attrs else ""
            w.emit(f'{name} = "{node.text}"({", ".join(args)}){attrs} : ({", ".join(types)}) -> {node.type}')
        else:
            raise AssertionError(node.kind)
        if node.shape == "uniform":
            self.memo[key] = name  # visible everywhere
        else:
            self.remember(key, name)
        return name

    def vector(self, node: Node, copy, offset: str, tail: bool) -> str:
        """An elementwise node's vector at row offset `offset` (copy: memo key of this position)."""
        lanes = self.g.lanes
        if node.shape != "elem":
            key = (node, "splat")
            found = self.lookup(key)
            if found is None:
                found = self.splat(self.scalar(node), node.type, lanes)
                self.remember(key, found)
            return found
        key = (node, copy)
        found = self.lookup(key)
        if found is not None:
            return found
        name = self.w.fresh("e")
        vt = vector_type(lanes, node.type)
        in_bounds = "false" if tail else "true"
        if node.kind == "input":
            role = self.g.inputs[node.input][1]
            idx = ", ".join([self.ivs[i] for i in role.outer] + [offset])
            pad = "0.0" if node.type.startswith(("f", "bf")) else "0"
            if node.type != "i1":
                padv = self.w.fresh("p")
                self.w.emit(f"{padv} = arith.constant {pad} : {node.type}")
            if node.type == "i1":  # read as the bytes it is stored in (see `function`)
                wide, padv = self.w.fresh("e"), self.w.fresh("p")
                self.w.emit(f"{padv} = arith.constant 0 : i8")
                self.w.emit(f"{wide} = vector.transfer_read %t{node.input}[{idx}], {padv} {{in_bounds = [{in_bounds}]}} : "
                            f"{self.view_type(node.input, 'i8')}, {vector_type(lanes, 'i8')}")
                self.w.emit(f"{name} = arith.trunci {wide} : {vector_type(lanes, 'i8')} to {vt}")
            else:
                self.w.emit(f"{name} = vector.transfer_read %t{node.input}[{idx}], {padv} {{in_bounds = [{in_bounds}]}} : "
                            f"{self.view_type(node.input)}, {vt}")
        elif node.kind == "cached":
            out = node.input
            idx = ", ".join(list(self.ivs) + [offset])
            padv = self.w.fresh("p")
            self.w.emit(f"{padv} = arith.constant 0.0 : f32")
            self.w.emit(f"{name} = vector.transfer_read {self.tensors[out]}[{idx}], {padv} {{in_bounds = [{in_bounds}]}} : "
                        f"{self.out_view_type(out)}, {vt}")
        else:
            raise AssertionError(node.kind)
        self.remember(key, name)
        return name

    def view_type(self, i: int, elem: str = "") -> str:
        value, role = self.g.inputs[i]
        elem = elem or str(ir.RankedTensorType(value.type).element_type)
        return tensor_type(role.shape(self.g.sizes, self.g.n), elem)

    def out_view_type(self, k: int) -> str:
        r, _, role = self.g.outputs[k]
        return tensor_type(role.shape(self.g.sizes, self.g.n), str(ir.RankedTensorType(r.type).element_type))

    # -- planning
    def plan(self):
        """Passes: reductions by the pass that accumulates them, outputs by the pass that writes
        them, elementwise values a later pass needs again (kept in an output's row or recomputed)."""
        g = self.g
        reduces = []
        seen = set()

        def collect(node):
            if node in seen:
                return
            seen.add(node)
            for a in node.operands:
                collect(a)
            if node.kind == "reduce":
                reduces.append(node)

        for _, node, _ in g.outputs:
            collect(node)
        for r in reduces:
            r.pass_ = r.level - 1
        full_outputs = [k for k, (_, node, role) in enumerate(g.outputs) if role.row]
        last = max([r.pass_ for r in reduces] + [g.outputs[k][1].level for k in full_outputs], default=-1)
        writes = {k: g.outputs[k][1].level for k in full_outputs}
        self.reduces = reduces
        self.writes = writes
        self.last = last
        # values needed again in a later pass: the expensive ones are kept in the row of an output
        # the last pass writes (one value per output), the others recomputed
        self.cache = {}  # node -> output index
        free = [k for k in full_outputs if writes[k] == last]
        for p in range(last + 1):
            roots = [r.operands[0] for r in reduces if r.pass_ == p] + \
                [g.outputs[k][1] for k in full_outputs if writes[k] == p]
            stack, visited = list(roots), set()
            while stack:
                node = stack.pop()
                if node in visited or node.shape != "elem":
                    continue
                visited.add(node)
                if node.level < p and node in self.cache:
                    continue
                if node.level < p and free and (node.ops > g.recompute_ops or node.expensive):
                    self.cache[node] = free.pop(0)
                    continue
                stack.extend(node.operands)
        return self

    # -- emission
    def function(self, name: str) -> str:
        g = self.g
        self.plan()
        args = [f"%in{i}: {v.type}" for i, (v, _) in enumerate(g.inputs)] + \
            [f"%a{i}: {v.type}" for i, v in enumerate(g.args)]
        results = [str(g.final(r).type) for r, _, _ in g.outputs]
        pre = self.w.section()
        for i, (value, role) in enumerate(g.inputs):
            src = list(ir.RankedTensorType(value.type).shape)
            elem = str(ir.RankedTensorType(value.type).element_type)
            view = role.shape(g.sizes, g.n)
            if elem == "i1" and role.row:
                # A bool tensor holds one byte per element, a vector<Nxi1> load reads N bits: the
                # rows read as vectors are widened to i8 first (what the kernel loads, then truncates).
                _reshape(pre, f"%in{i}", src, view, elem, f"%b{i}")
                ids = ", ".join(f"d{d}" for d in range(len(view)))
                amap = f"affine_map<({ids}) -> ({ids})>"
                its = ", ".join(['"parallel"'] * len(view))
                pre.emit(f"%be{i} = tensor.empty() : {tensor_type(view, 'i8')}")
                pre.emit(f"%t{i} = linalg.generic {{indexing_maps = [{amap}, {amap}], iterator_types = [{its}]}} "
                         f"ins(%b{i} : {tensor_type(view, 'i1')}) outs(%be{i} : {tensor_type(view, 'i8')}) {{")
                pre.emit("^bb0(%x: i1, %y: i8):")
                pre.emit("  %z = arith.extui %x : i1 to i8")
                pre.emit("  linalg.yield %z : i8")
                pre.emit(f"}} -> {tensor_type(view, 'i8')}")
                continue
            _reshape(pre, f"%in{i}", src, view, elem, f"%t{i}")
        for k, (r, node, role) in enumerate(g.outputs):
            pre.emit(f"%o{k} = tensor.empty() : {self.out_view_type(k)}")
            self.tensors[k] = f"%o{k}"
        # the row loops
        w = self.w
        loop_results = []
        carried = list(range(len(g.outputs)))
        for d, size in enumerate(g.sizes):
            iv = f"%r{d}"
            res = w.fresh("rows")
            inits = ", ".join(f"%x{d}_{k} = {self.tensors[k]}" for k in carried)
            types = ", ".join(self.out_view_type(k) for k in carried)
            w.emit(f"{res}:{len(carried)} = scf.for {iv} = {self.index(0)} to {self.index(size)} step {self.index(1)} "
                   f"iter_args({inits}) -> ({types}) {{")
            loop_results.append(res)
            for k in carried:
                self.tensors[k] = f"%x{d}_{k}"
            self.ivs.append(iv)
        self.push()
        for p in range(self.last + 1):
            self.emit_pass(p)
        # per-row outputs
        for k, (r, node, role) in enumerate(g.outputs):
            if not role.row:
                s = self.scalar(node)
                new = w.fresh("ins")
                idx = ", ".join(self.ivs)
                w.emit(f"{new} = tensor.insert {s} into {self.tensors[k]}[{idx}] : {self.out_view_type(k)}")
                self.tensors[k] = new
        self.pop()
        for d in reversed(range(len(g.sizes))):
            w.emit(f"scf.yield {', '.join(self.tensors[k] for k in carried)} : "
                   f"{', '.join(self.out_view_type(k) for k in carried)}")
            # Rows are independent: every row loop may be the one the threads share (a unit one
            # folds away; parallel.choose_split picks among the rest by balance).
            w.emit("}" + f" {{{THREAD_SPLIT}}}")
            for k in carried:
                self.tensors[k] = f"{loop_results[d]}#{k}"
        post = self.w.section()
        outs = []
        for k, (r, node, role) in enumerate(g.outputs):
            dst = list(ir.RankedTensorType(g.final(r).type).shape)
            elem = str(ir.RankedTensorType(r.type).element_type)
            outs.append(_reshape(post, self.tensors[k], role.shape(g.sizes, g.n), dst, elem, f"%res{k}"))
        lines = [f"func.func private @{name}({', '.join(args)}) -> ({', '.join(results)}) {{"]
        lines += w.declarations() + pre.lines + self.top.lines + w.lines + post.lines
        lines.append(f"  return {', '.join(outs)} : {', '.join(results)}")
        lines.append("}")
        return "\n".join(lines)

    def emit_pass(self, p: int) -> None:
        g, w = self.g, self.w
        lanes, unroll = g.lanes, g.unroll
        reduces = [r for r in self.reduces if r.pass_ == p]
        stores = [(node, k) for node, k in self.cache.items() if node.level == p]
        writes = [(g.outputs[k][1], k) for k, wp in self.writes.items() if wp == p]
        if not (reduces or stores or writes):
            return
        written = sorted({k for _, k in stores} | {k for _, k in writes})
        full, tail = divmod(g.n, lanes)
        steps, rest = divmod(full, unroll)
        idents = {}
        for r in reduces:
            ident = w.fresh("id")
            w.emit(f"{ident} = arith.constant dense<{scalar_literal(COMBINERS[r.combiner])}> : {vector_type(lanes, r.type)}")
            idents[r] = ident
        # scalar values this pass needs, hoisted out of its loop
        self.hoist([r.operands[0] for r in reduces] + [n for n, _ in stores] + [n for n, _ in writes], p)
        accs = {(r, u): idents[r] for r in reduces for u in range(min(unroll, max(full, 1)))}
        nans = [r for r in reduces if r.combiner in NAN_TRACKED]
        if nans:
            clear = w.fresh("nan")
            w.emit(f"{clear} = arith.constant dense<false> : {vector_type(lanes, 'i1')}")
            accs.update({(r, u, "nan"): clear for r in nans for u in range(min(unroll, max(full, 1)))})
        if steps:
            res = w.fresh("pass")
            acc_keys = [(r, u) for r in reduces for u in range(unroll)] + \
                [(r, u, "nan") for r in nans for u in range(unroll)]
            names = [f"%acc{p}_{i}" for i in range(len(acc_keys))]
            tnames = [f"%w{p}_{k}" for k in written]
            inits = [f"{n} = {accs[key]}" for n, key in zip(names, acc_keys)] + \
                [f"{n} = {self.tensors[k]}" for n, k in zip(tnames, written)]
            types = [vector_type(lanes, "i1" if len(key) == 3 else key[0].type) for key in acc_keys] + \
                [self.out_view_type(k) for k in written]
            j = f"%j{p}"
            w.emit(f"{res}:{len(types)} = scf.for {j} = {self.index(0)} to {self.index(steps * unroll * lanes)} "
                   f"step {self.index(unroll * lanes)} iter_args({', '.join(inits)}) -> ({', '.join(types)}) {{")
            for n, k in zip(tnames, written):
                self.tensors[k] = n
            inner = dict(zip(acc_keys, names))
            self.push()
            for u in range(unroll):
                off = w.fresh("j")
                w.emit(f"{off} = arith.addi {j}, {self.index(u * lanes)} : index")
                self.step(("u", p, u), off, False, reduces, stores, writes, inner, u, p)
            self.pop()
            w.emit(f"scf.yield {', '.join([inner[key] for key in acc_keys] + [self.tensors[k] for k in written])} : "
                   f"{', '.join(types)}")
            w.emit("}")
            for i, key in enumerate(acc_keys):
                accs[key] = f"{res}#{i}"
            for i, k in enumerate(written):
                self.tensors[k] = f"{res}#{len(acc_keys) + i}"
        for i in range(rest):
            off = self.index((steps * unroll + i) * lanes)
            self.push()
            self.step(("l", p, i), off, False, reduces, stores, writes, accs, i, p)
            self.pop()
        if tail:
            off = self.index(full * lanes)
            self.push()
            self.step(("t", p), off, True, reduces, stores, writes, accs, 0, p)
            self.pop()
        for r in reduces:
            parts = [accs[(r, u)] for u in range(unroll) if (r, u) in accs]
            while len(parts) > 1:
                nxt = []
                for a, b in zip(parts[::2], parts[1::2]):
                    nxt.append(_combine(w, r.combiner, a, b, vector_type(lanes, r.type)))
                if len(parts) % 2:
                    nxt.append(parts[-1])
                parts = nxt
            s = w.combine_lanes(parts[0], lanes, lambda a, b, t, r=r: _combine(w, r.combiner, a, b, t), r.type)
            if r.combiner in NAN_TRACKED:  # a NaN anywhere in the row is the result
                flags = [accs[(r, u, "nan")] for u in range(unroll) if (r, u, "nan") in accs]
                while len(flags) > 1:
                    merged = w.fresh("nan")
                    w.emit(f"{merged} = arith.ori {flags[0]}, {flags[1]} : {vector_type(lanes, 'i1')}")
                    flags = [merged] + flags[2:]
                anynan, nanv, fixed = w.fresh("nan"), w.fresh("nan"), w.fresh("red")
                w.emit(f"{anynan} = vector.reduction <or>, {flags[0]} : {vector_type(lanes, 'i1')} into i1")
                w.emit(f"{nanv} = arith.constant 0x7FC00000 : f32")
                w.emit(f"{fixed} = arith.select {anynan}, {nanv}, {s} : f32")
                s = fixed
            init = self.scalar(r.operands[1])
            total = w.fresh("red")
            w.emit(f'{total} = "{r.combiner}"({init}, {s}) : ({r.type}, {r.type}) -> {r.type}')
            self.remember((r, None), total)

    def hoist(self, roots: list, p: int) -> None:
        """Emit the scalar operands (and their splats) of the elementwise nodes under `roots` now."""
        seen = set()
        stack = list(roots)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.shape != "elem":
                self.vector(node, None, "", False)  # the splat
                continue
            if node in self.cache and node.level < p:
                continue
            stack.extend(node.operands)

    def step(self, copy, offset, tail, reduces, stores, writes, accs, slot, p) -> None:
        """One vector position of a pass: accumulate, then store (every read before any write)."""
        g, w = self.g, self.w
        lanes = g.lanes
        values = {}
        for r in reduces:
            values[r] = self.value_at(r.operands[0], copy, offset, tail, p)
        for node, k in stores + writes:
            values[(node, k)] = self.value_at(node, copy, offset, tail, p)
        mask = None
        if tail and reduces:
            mask = w.fresh("m")
            w.emit(f"{mask} = vector.constant_mask [{g.n % lanes}] : {vector_type(lanes, 'i1')}")
        for r in reduces:
            v = values[r]
            if mask is not None:
                ident = w.fresh("id")
                w.emit(f"{ident} = arith.constant dense<{scalar_literal(COMBINERS[r.combiner])}> : {vector_type(lanes, r.type)}")
                sel = w.fresh("sel")
                w.emit(f"{sel} = arith.select {mask}, {v}, {ident} : {vector_type(lanes, 'i1')}, {vector_type(lanes, r.type)}")
                v = sel
            accs[(r, slot)] = _combine(w, r.combiner, accs[(r, slot)], v, vector_type(lanes, r.type))
            if r.combiner in NAN_TRACKED:
                nan, new = w.fresh("nan"), w.fresh("nan")
                w.emit(f"{nan} = arith.cmpf uno, {v}, {v} : {vector_type(lanes)}")
                w.emit(f"{new} = arith.ori {accs[(r, slot, 'nan')]}, {nan} : {vector_type(lanes, 'i1')}")
                accs[(r, slot, "nan")] = new
        in_bounds = "false" if tail else "true"
        for node, k in stores + writes:
            new = w.fresh("wr")
            idx = ", ".join(list(self.ivs) + [offset])
            w.emit(f"{new} = vector.transfer_write {values[(node, k)]}, {self.tensors[k]}[{idx}] "
                   f"{{in_bounds = [{in_bounds}]}} : {vector_type(lanes)}, {self.out_view_type(k)}")
            self.tensors[k] = new

    def value_at(self, node, copy, offset, tail, p) -> str:
        """`vector`, reading values kept from an earlier pass from their output row."""
        if node.shape == "elem" and node in self.cache and node.level < p:
            key = (node, copy)
            found = self.lookup(key)
            if found is not None:
                return found
            k = self.cache[node]
            read = Node("cached", "elem", "f32", input=k)
            name = self.vector(read, copy, offset, tail)
            self.remember(key, name)
            return name
        if node.shape == "elem" and node.kind == "op" and node.text == "broadcast":
            return self.value_at(node.operands[0], copy, offset, tail, p)
        if node.shape != "elem" or node.kind != "op":
            return self.vector(node, copy, offset, tail)
        key = (node, copy)
        found = self.lookup(key)
        if found is not None:
            return found
        lanes = self.g.lanes
        args = [self.value_at(a, copy, offset, tail, p) for a in node.operands]
        types = [vector_type(lanes, a.type) for a in node.operands]
        attrs = f" {{{node.attrs}}}" if node.attrs else ""
        name = self.w.fresh("e")
        self.w.emit(f'{name} = "{node.text}"({", ".join(args)}){attrs} : ({", ".join(types)}) -> {vector_type(lanes, node.type)}')
        self.remember(key, name)
        return name


# max/min that propagate NaN: combined lane-wise as a compare and a select (one vmaxps), their NaN
# lanes tracked in a mask accumulator (LLVM's lowering of a NaN-propagating max is five instructions)
NAN_TRACKED = {"arith.maximumf": "ogt", "arith.minimumf": "olt"}


def _combine(w: KernelText, combiner: str, a: str, b: str, vt: str) -> str:
    """`a` combined with `b` (vectors of type `vt`); max/min without their NaN rule (see NAN_TRACKED)."""
    name = w.fresh("c")
    if combiner in NAN_TRACKED:
        cmp = w.fresh("gt")
        w.emit(f"{cmp} = arith.cmpf {NAN_TRACKED[combiner]}, {a}, {b} : {vt}")
        w.emit(f"{name} = arith.select {cmp}, {a}, {b} : {vt.replace('xf32', 'xi1')}, {vt}")
    else:
        w.emit(f'{name} = "{combiner}"({a}, {b}) : ({vt}, {vt}) -> {vt}')
    return name


def _reassociation(big: list, small: list):
    """Groups of consecutive dims of `big` whose products are the dims of `small` (unit dims joining
    a neighbour's group), or None."""
    if not small:
        return [] if all(d == 1 for d in big) else None
    groups, i = [], 0
    for size in small:
        group, product = [], 1
        while i < len(big) and (product != size or (not group)):
            group.append(i)
            product *= big[i]
            i += 1
            if product == size and size != 1:
                break
        if product != size:
            return None
        groups.append(group)
    while i < len(big):  # trailing unit dims join the last group
        if big[i] != 1:
            return None
        groups[-1].append(i)
        i += 1
    return groups


def _reshape(w: KernelText, value: str, src: list, dst: list, elem: str, name: str) -> str:
    """`value` (static shape `src`) as shape `dst` (same elements, same order)."""
    if src != dst and len(src) > len(dst) > 0:
        groups = _reassociation(src, dst)
        if groups is not None:
            w.emit(f"{name} = tensor.collapse_shape {value} {groups} : {tensor_type(src, elem)} into {tensor_type(dst, elem)}")
            return name
    if src != dst and len(dst) > len(src) > 0:
        groups = _reassociation(dst, src)
        if groups is not None:
            w.emit(f"{name} = tensor.expand_shape {value} {groups} output_shape [{', '.join(map(str, dst))}] : "
                   f"{tensor_type(src, elem)} into {tensor_type(dst, elem)}")
            return name
    if src == dst:
        w.emit(f"{name} = tensor.cast {value} : {tensor_type(src, elem)} to {tensor_type(dst, elem)}")
        return name
    current, shape = value, src
    if len(shape) == 0:
        w.emit(f"{name} = tensor.expand_shape {value} [] output_shape [{', '.join(map(str, dst))}] : "
               f"{tensor_type(src, elem)} into {tensor_type(dst, elem)}")
        return name
    if len(dst) == 0:
        w.emit(f"{name} = tensor.collapse_shape {value} [] : {tensor_type(src, elem)} into {tensor_type(dst, elem)}")
        return name
    numel = math.prod(src)
    if len(shape) > 1:
        flat = w.fresh("flat") if len(dst) > 1 else name
        group = ", ".join(str(i) for i in range(len(shape)))
        w.emit(f"{flat} = tensor.collapse_shape {current} [[{group}]] : {tensor_type(shape, elem)} into {tensor_type([numel], elem)}")
        current, shape = flat, [numel]
    if len(dst) > 1:
        group = ", ".join(str(i) for i in range(len(dst)))
        w.emit(f"{name} = tensor.expand_shape {current} [[{group}]] output_shape [{', '.join(map(str, dst))}] : "
               f"{tensor_type(shape, elem)} into {tensor_type(dst, elem)}")
        return name
    if current != name:
        w.emit(f"{name} = tensor.cast {current} : {tensor_type(shape, elem)} to {tensor_type(dst, elem)}")
    return name
