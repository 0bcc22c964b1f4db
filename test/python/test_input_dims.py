"""`torch.export.Dim` constraints on inputs are checked at execute (issue 11).

The defect: a `.pte` tensor carries only its upper-bound sizes, so an input below its Dim's
minimum, or two inputs disagreeing on a Dim they share, were accepted silently and computed
garbage. The compiler now writes each method's constraints (`etc.schema.input_dims`) and the
runtime checks every execute against them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import etc
from etc.errors import InputError, ProgramError
from etc.runtime import Runtime
from etc.schema import deserialize_pte, input_dims, serialize_pte


class AddRows(torch.nn.Module):
    def forward(self, a, b):
        return a + b.sum(dim=1, keepdim=True), torch.cat([a, a], dim=0)


def _method(module, inputs, dynamic_shapes):
    ep = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    program = etc.to_edge(ep).to_executorch()
    return program, Runtime.get().load_program(program.buffer).load_method("forward")


@pytest.fixture(scope="module")
def shared():
    n = torch.export.Dim("n", min=2, max=16)
    inputs = (torch.randn(4, 3), torch.randn(4, 5))
    return _method(AddRows(), inputs, ({0: n}, {0: n}))


def test_sizes_within_the_constraints_run(shared):
    _, method = shared
    for rows in (2, 9, 16):
        a, b = np.ones((rows, 3), np.float32), np.ones((rows, 5), np.float32)
        out, doubled = method.execute([a, b])
        np.testing.assert_allclose(out, a + 5) and np.testing.assert_array_equal(doubled.shape, (2 * rows, 3))


def test_a_size_below_the_dim_minimum_is_refused(shared):
    _, method = shared
    with pytest.raises(InputError, match=r"input 0: dimension 0 is 1, outside its range 2\.\.16 \(Dim 'n'\)"):
        method.execute([np.ones((1, 3), np.float32), np.ones((1, 5), np.float32)])


def test_inputs_disagreeing_on_a_shared_dim_are_refused(shared):
    _, method = shared
    with pytest.raises(InputError, match=r"input 1: dimension 0 is 3, but input 0 dimension 0 is 4: both are Dim 'n'"):
        method.execute([np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)])


def test_a_derived_dim_is_checked_against_its_expression():
    class Halves(torch.nn.Module):
        def forward(self, x, y):
            return x[: y.shape[0]] + y, y

    n = torch.export.Dim("n", min=2, max=8)
    _, method = _method(Halves(), (torch.randn(8, 2), torch.randn(4, 2)), ({0: 2 * n}, {0: n}))
    method.execute([np.ones((6, 2), np.float32), np.ones((3, 2), np.float32)])
    with pytest.raises(InputError, match=r"input 0: dimension 0 is 6, but it is 2\*s\d+ = 8"):
        method.execute([np.ones((6, 2), np.float32), np.ones((4, 2), np.float32)])


def test_the_record_is_named_data_stock_executorch_ignores(shared):
    program, _ = shared
    record = program.pte.named_data[input_dims.key("forward")]
    assert record.startswith(b"[[[") and b',2,16,"n"]' in record
    bad = deserialize_pte(program.buffer)
    bad.named_data[input_dims.key("forward")] = b"[1]"
    with pytest.raises(ProgramError, match="expected a list of 2 inputs"):
        Runtime.get().load_program(serialize_pte(bad)).load_method("forward").execute(
            [np.ones((4, 3), np.float32), np.ones((4, 5), np.float32)])
