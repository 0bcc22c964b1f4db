"""Partition grouping and outlining (compiler/delegation.py) on hand-written IR.

The IR uses unregistered ops so that these tests pin down the graph algorithm
alone: cycle-freedom, ordering of the call, and what moves into the outlined
function.
"""

import pytest
from torch_mlir import ir

from etc.compiler.delegation import (CapabilityPartitioner, DelegationSpec, Partition, group_cycle_free, outline)

DIAMOND = """
func.func @forward(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = "edge.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %b = "edge.unsupported"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %c = "edge.add_tensor"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %d = "edge.sigmoid"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %e = "edge.unsupported"(%d) : (tensor<4xf32>) -> tensor<4xf32>
  %f = "edge.mul_tensor"(%c, %d) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %f, %e : tensor<4xf32>, tensor<4xf32>
}
"""


class _Program:
    def __init__(self, module, context):
        self.module, self.context, self.constants = module, context, {}


@pytest.fixture
def program():
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        yield _Program(ir.Module.parse(DIAMOND), ctx)


def _ops(program):
    func = program.module.body.operations[0]
    return [op.operation for op in func.regions[0].blocks[0].operations]


def _supported(op):
    return op.name not in ("edge.unsupported", "func.return")


def test_groups_never_create_a_cycle(program):
    groups = group_cycle_free(_ops(program), _supported)
    names = [[op.name for op in g] for g in groups]
    # add depends on relu through an unsupported op: fusing them would need the
    # unsupported op both before and after the call.
    assert names == [["edge.relu", "edge.sigmoid"], ["edge.add_tensor", "edge.mul_tensor"]]


def test_outline_replaces_partition_by_one_call_and_keeps_ssa_order(program):
    groups = group_cycle_free(_ops(program), _supported)
    fn, call = outline(program, Partition(groups[0], DelegationSpec("cpu")), "delegate_cpu_0")
    program.module.operation.verify()
    body = [op.name for op in _ops(program)]
    assert body[0] == "backend.delegate"
    assert "edge.relu" not in body and "edge.sigmoid" not in body
    assert len(call.results) == 2  # relu and sigmoid are both used outside
    inner = [op.operation.name for op in fn.regions[0].blocks[0].operations]
    assert inner == ["edge.relu", "edge.sigmoid", "func.return"]


def test_capability_partitioner_never_crashes_on_a_failing_check(program):
    def check(op):
        if op.name == "edge.sigmoid":
            raise KeyError("no visitor for sigmoid")
        return _supported(op)

    result = CapabilityPartitioner(DelegationSpec("cpu"), check).partition(program)
    assert "edge.sigmoid" in result.rejected and "KeyError" in result.rejected["edge.sigmoid"]
    delegated = {op.name for p in result.partitions for op in p.ops}
    assert "edge.sigmoid" not in delegated and "edge.relu" in delegated
