"""etc-cpu-bool-vectors-as-bytes: a vector of bools loaded or stored as the bytes a bool tensor holds.

A bool tensor is one byte per element (torch's layout, and the memref lowering's: an `i1` element
is a byte in memory). LLVM packs a vector of `i1` into bits: `load <64 x i1>` reads 8 bytes and
takes each bit for an element. So a kernel whose vector code reads a bool tensor (a GEMM epilogue
fusing `where(mask, ...)`, a vectorized elementwise op over a mask) read the mask's first bytes
as bits and computed a wrong answer (an attention whose causal mask the model also returned).

After the lowering to the LLVM dialect every contiguous vector access of `i1` data becomes the
same access of `i8` bytes plus a conversion: a load (or masked load) reads `<N x i8>` and
truncates (a bool byte is 0 or 1); a store (or masked store) extends to bytes first. Gathers and
scatters already access each element at its own address and stay. A stack slot of a bool vector
type would hold packed bits on purpose: the pass refuses one rather than guess.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import llvm

from etc.passes.pass_api import Pass, register_pass
from etc.targets.cpu.ir_query import walk

_LOADS = ("llvm.load", "llvm.intr.masked.load")
_STORES = ("llvm.store", "llvm.intr.masked.store")


def _bool_vector(type_) -> bool:
    return isinstance(type_, ir.VectorType) and str(ir.VectorType(type_).element_type) == "i1"


def _as_bytes(type_):
    return ir.VectorType.get(ir.VectorType(type_).shape, ir.IntegerType.get_signless(8))


@register_pass
class BoolVectorsAsBytes(Pass):
    """Vector loads and stores of i1 data -> of i8 bytes. See the module docstring."""

    name = "etc-cpu-bool-vectors-as-bytes"
    summary = "Vector loads and stores of i1 data (LLVM dialect) -> of i8 bytes, as bool tensors are stored"

    def run(self, module) -> None:
        loads, stores = [], []
        for op in walk(module, ("llvm.alloca", *_LOADS, *_STORES)):
            if op.name == "llvm.alloca":
                if "xi1>" in str(op.attributes["elem_type"]):
                    raise self.error(f"{self.name}: a stack slot of a bool vector type "
                                     f"({op.attributes['elem_type']}) holds packed bits, not bool bytes", at=op)
            elif op.name in _LOADS:
                if _bool_vector(op.results[0].type):
                    loads.append(op)
            elif _bool_vector(op.operands[0].type):
                stores.append(op)
        _rewrite(module, loads, stores)
        self.count("changed", len(loads) + len(stores))


def _rewrite(module, loads: list, stores: list) -> None:
    with module.context:
        for op in loads:
            with ir.InsertionPoint(op), op.location:
                bools = op.results[0].type
                alignment = op.attributes["alignment"] if "alignment" in op.attributes else None
                if op.name == "llvm.load":
                    load = llvm.LoadOp(_as_bytes(bools), op.operands[0], alignment=alignment,
                                       nontemporal="nontemporal" in op.attributes).result
                else:  # masked load: (address, mask[, pass-through]); the lanes masked off read the pass-through
                    address, mask, *rest = op.operands
                    pass_thru = llvm.ZExtOp(_as_bytes(bools), rest[0]).result if rest else None
                    load = llvm.MaskedLoadOp(_as_bytes(bools), address, mask, alignment, pass_thru=pass_thru,
                                             nontemporal="nontemporal" in op.attributes).result
                new = llvm.TruncOp(bools, load, ir.Attribute.parse("#llvm.overflow<none>")).result
            op.results[0].replace_all_uses_with(new)
            op.erase()
        for op in stores:
            with ir.InsertionPoint(op), op.location:
                value, address, *rest = op.operands
                alignment = op.attributes["alignment"] if "alignment" in op.attributes else None
                data = llvm.ZExtOp(_as_bytes(value.type), value).result
                if op.name == "llvm.store":
                    llvm.StoreOp(data, address, alignment=alignment, nontemporal="nontemporal" in op.attributes)
                else:
                    llvm.MaskedStoreOp(data, address, rest[0], alignment,
                                       nontemporal="nontemporal" in op.attributes)
            op.erase()
