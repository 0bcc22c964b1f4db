"""Every model of the zoo (etc.models.zoo) imports into verified IR whose
ops all point at the zoo's source lines and whose constants match the
module's state."""

import numpy as np
import pytest
import torch

import etc

# Ops are built by the aten dialect (etc.dialects.aten.build_op); these tests
# need it and run as soon as it is part of the tree.
pytest.importorskip("etc.dialects.aten", reason="the aten dialect (etc.dialects.aten) is not in the tree yet")
from etc.ir.locations import location_name, source_position
from etc.models.zoo import ZOO


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_imports(name):
    model = ZOO[name]()
    programs = model.export()
    program = etc.import_program(programs)
    program.verify()
    assert program.methods == list(programs)
    assert "dense" not in program.to_text(debug_info=False)

    for method, ep in programs.items():
        function = program.func(method)
        tensor_inputs = [spec for spec in ep.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
        assert len(function.regions[0].blocks[0].arguments) == len(tensor_inputs)
        for op in function.regions[0].blocks[0].operations:
            if op.operation.name.startswith("aten."):
                position = source_position(op.location)
                assert position is not None and position.file.endswith("zoo.py"), (op.operation.name, op.location)
                assert location_name(op.location)  # the FX node name

    state = dict(model.module.state_dict(keep_vars=False))
    for method, ep in programs.items():
        for info in program.signatures[method].state:
            expected = ep.state_dict.get(info.target, ep.constants.get(info.target))
            if expected is None:
                expected = state[info.target]
            array = program.constants[info.global_name]
            assert array.shape == tuple(expected.shape)
            if expected.dtype != torch.bfloat16:
                np.testing.assert_array_equal(array, expected.detach().numpy())
