"""Whole models through the kernels: each zoo model is exported, decomposed to Core ATen,
and its graph run node by node with the out-variant kernels (outs preallocated from the
graph's shapes, as planned memory would be); the result must match eager PyTorch."""

import operator

import numpy as np
import pytest
import torch

from etc.runtime.kernels import get_kernel
from etc.runtime.kernels.coverage import out_variant_of
from etc.schema import from_torch_dtype

from etc.models.zoo import ZOO

_DROPPED = {"dtype", "layout", "device", "pin_memory"}


def _np(value):
    return value.detach().numpy().copy() if isinstance(value, torch.Tensor) else value


def _convert(value, env):
    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return [_convert(v, env) for v in value]
    if isinstance(value, torch.dtype):
        return int(from_torch_dtype(value))
    if isinstance(value, (torch.memory_format, torch.layout, torch.device)):
        return None
    return value


def _alloc(val):
    if isinstance(val, (list, tuple)):
        return [_alloc(v) for v in val]
    return np.empty(tuple(int(s) for s in val.shape), torch.empty((), dtype=val.dtype).numpy().dtype)


def run_graph(ep, inputs):
    """Interpret the decomposed exported program with our kernels; returns the user outputs."""
    gm = ep.graph_module
    sig = ep.graph_signature
    params = {**ep.state_dict, **ep.constants}
    env = {}
    user_inputs = iter(inputs)
    used = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            name = sig.inputs_to_parameters.get(node.name) or sig.inputs_to_buffers.get(node.name) or \
                sig.inputs_to_lifted_tensor_constants.get(node.name)
            env[node] = _np(params[name]) if name is not None else _np(next(user_inputs))
        elif node.op == "call_function" and node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
        elif node.op == "call_function":
            op = node.target
            packet, overload = op._schema.name.split("::")[1], op._overloadname
            out_name = out_variant_of(packet, overload)
            assert out_name, f"{op} has no out variant"
            used.add(out_name)
            out_schema = getattr(getattr(torch.ops.aten, out_name.split("::")[1].split(".")[0]),
                                 out_name.split(".")[-1])._schema
            given = {a.name: v for a, v in zip(op._schema.arguments, node.args)}
            given.update(node.kwargs)
            args = []
            for a in out_schema.arguments:
                if a.is_out:
                    continue
                if a.name in given:
                    args.append(_convert(given[a.name], env))
                elif a.has_default_value():
                    args.append(a.default_value)
                else:
                    raise AssertionError(f"{out_name}: no value for {a.name}")
            outs = _alloc(node.meta["val"])
            n_out = sum(a.is_out for a in out_schema.arguments)
            out_args = [outs] if isinstance(outs, np.ndarray) or n_out == 1 else list(outs)
            env[node] = get_kernel(out_name)(*args, *out_args)
        elif node.op == "output":
            return [env[n] for n in node.args[0]], used


def _tolerance(name):
    return 1e-3


# A representative subset (export dominates the time; test_end_to_end runs the whole zoo
# through the real pipeline): convs + batch norm, depthwise/inverted residuals, attention,
# rotary decoder, recurrent cells, a dynamic batch.
MODELS = ["small_cnn", "mobilenet_v2", "transformer_encoder", "decoder_lm", "lstm", "dynamic_batch"]


@pytest.mark.parametrize("name", [m for m in MODELS if m in ZOO])
def test_zoo_model_runs_on_the_kernels(name):
    model = ZOO[name]()
    ep = torch.export.export(model.module, model.example_inputs, dynamic_shapes=model.dynamic_shapes)
    ep = ep.run_decompositions()
    with torch.no_grad():
        expected = model.module(*model.example_inputs)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    ours, used = run_graph(ep, model.example_inputs)
    assert len(ours) == len(expected)
    for o, e in zip(ours, expected):
        np.testing.assert_allclose(np.asarray(o), e.numpy(), rtol=_tolerance(name), atol=_tolerance(name))
    assert used
