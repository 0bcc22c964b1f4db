"""PT2E int8 (CpuQuantizer + torchao's prepare/convert) and torchao's LLM weight configs,
through to_edge and the portable runtime (issue 10, parts 1 and 2).

The reference for a quantized program is the eager quantized model (the converted
GraphModule, or the torchao-quantized module): etc runs the same int8 math, so its output
matches within 30 dB SQNR (in practice bit-exact or a float32 rounding away).
"""

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("torchao")

import etc  # noqa: E402
from etc.errors import UnsupportedConstructError  # noqa: E402
from etc.runtime import Runtime  # noqa: E402
from etc.models.quantized import quantize, quantized_zoo, sqnr  # noqa: E402
from etc.models.zoo import ZOO  # noqa: E402

CNNS = ["small_cnn", "mobilenet_v2", "mobilenet_v1_025", "resnet8", "kws_dscnn"]


def _run(program, inputs):
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    return [torch.as_tensor(o) for o in method.execute(list(inputs))]


def _ops(ep) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("name", CNNS)
def test_zoo_cnn_quantized_with_cpu_quantizer_runs_and_matches_the_eager_quantized_model(name):
    zoo_model, converted, ep = quantized_zoo(name)
    ops = _ops(ep)
    assert "quantized_decomposed.quantize_per_tensor.default" in ops
    assert "quantized_decomposed.dequantize_per_channel.default" in ops  # per-channel int8 weights
    edge = etc.to_edge(ep)
    text = str(edge)
    assert "edge.quantized_decomposed_dequantize_per_channel" in text
    # Weights stay int8 in the program (4x smaller than float), dequantized by the kernel.
    int8_constants = [a for a in edge.program_ir.constants.values() if a.dtype == "int8"]
    assert int8_constants and sum(a.size for a in int8_constants) > 0.9 * sum(
        p.numel() for n, p in zoo_model.module.named_parameters() if n.endswith("weight") and p.dim() > 1)
    got = _run(edge.to_executorch(), zoo_model.example_inputs)[0]
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs)
    assert sqnr(want, got) >= 30
    # etc-fold-quantized: every conv, linear and add becomes one int8 op; the numbers stay.
    text = str(edge.transform(["etc-fold-quantized"]))
    assert "edge.convolution" not in text and "edge.addmm" not in text
    assert "edge.etc_quantized_conv2d" in text and "edge.etc_quantized_linear" in text
    assert "dequantize_per_channel" not in text  # weights are read as int8 by the folded ops
    assert sqnr(want, _run(edge.to_executorch(), zoo_model.example_inputs)[0]) >= 30


@pytest.mark.parametrize("name", ["decoder_lm"])
def test_zoo_transformers_quantized_statically_run_folded_or_not(name):
    """Attention models: masks and token ids stay as they are, residual adds are int8."""
    zoo_model, converted, ep = quantized_zoo(name)
    edge = etc.to_edge(ep)
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs)
    assert sqnr(want, _run(edge.to_executorch(), zoo_model.example_inputs)[0]) >= 30
    text = str(edge.transform(["etc-fold-quantized"]))
    assert "edge.etc_quantized_add" in text and "edge.etc_quantized_linear" in text  # [1, T, K] linears too
    assert "edge.addmm" not in text
    assert sqnr(want, _run(edge.to_executorch(), zoo_model.example_inputs)[0]) >= 30


def test_dynamic_config_quantizes_activations_per_call_and_keeps_float_outputs():
    zoo_model = ZOO["mlp"]()
    converted, ep = quantize(zoo_model, is_dynamic=True)
    ops = _ops(ep)
    assert "quantized_decomposed.choose_qparams.tensor" in ops
    assert "quantized_decomposed.quantize_per_tensor.tensor" in ops
    assert "quantized_decomposed.quantize_per_tensor.default" not in ops  # nothing static
    got = _run(etc.to_edge(ep).to_executorch(), zoo_model.example_inputs)[0]
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs)
    assert sqnr(want, got) >= 60


class _Everything(nn.Module):
    """Each annotated pattern once: conv+relu, depthwise conv, add+relu, mul, max/avg pooling,
    concat, flatten, linear+hardtanh, matmul."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.linear = nn.Linear(8 * 4 * 4 * 2, 16)
        self.other = nn.Linear(16, 16)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        z = torch.relu(self.depthwise(y) + y)
        z = z * y
        a = nn.functional.max_pool2d(z, 2)
        b = nn.functional.avg_pool2d(z, 2)
        c = torch.cat([a, b], dim=1).flatten(1)
        h = nn.functional.hardtanh(self.linear(c))
        return h @ self.other(h).T


def _everything():
    from etc.models.zoo import ZooModel

    torch.manual_seed(0)
    return ZooModel("everything", _Everything().eval(), (torch.randn(1, 3, 8, 8),))


def _quantize_params(node):
    """(scale, zero point) of a quantize/dequantize node."""
    return float(node.args[1]), int(node.args[2])


def test_annotations_fuse_relu_share_scales_and_quantize_every_compute_op():
    converted, ep = quantize(_everything())
    graph = converted.graph
    nodes = {n.name: n for n in graph.nodes}
    q = "quantized_decomposed.quantize_per_tensor.default"

    def quantized_output(node):
        return [u for u in node.users if str(u.target) == q]

    # ReLU fused into its producer: no quantize between conv and relu, one after relu.
    conv = next(n for n in graph.nodes if str(n.target) == "aten.conv2d.default")
    assert not quantized_output(conv)
    (relu,) = conv.users
    assert quantized_output(relu)
    # add + relu: the same.
    add = next(n for n in graph.nodes if str(n.target) == "aten.add.Tensor")
    assert not quantized_output(add) and quantized_output(next(iter(add.users)))
    # Every compute op reads dequantized inputs.
    for target in ("aten.conv2d.default", "aten.linear.default", "aten.mul.Tensor", "aten.matmul.default"):
        for node in (n for n in graph.nodes if str(n.target) == target):
            for arg in node.args[:2]:
                assert "dequantize" in str(arg.target), (node.name, arg.name)
    # Pooling, concat and flatten keep their input's scale and zero point.
    for target in ("aten.max_pool2d.default", "aten.avg_pool2d.default", "aten.flatten.using_ints"):
        node = next(n for n in graph.nodes if str(n.target) == target)
        (out_q,) = quantized_output(node)
        in_dq = node.args[0]
        assert _quantize_params(out_q) == _quantize_params(in_dq), target
    cat = next(n for n in graph.nodes if str(n.target) == "aten.cat.default")
    params = {_quantize_params(t) for t in cat.args[0]} | {_quantize_params(quantized_output(cat)[0])}
    assert len(params) == 1
    assert nodes  # (the graph is not empty)


def test_everything_model_runs_on_etc_folded_or_not():
    zoo_model = _everything()
    converted, ep = quantize(zoo_model)
    edge = etc.to_edge(ep)
    got = _run(edge.to_executorch(), zoo_model.example_inputs)[0]
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs)
    assert sqnr(want, got) >= 30
    text = str(edge.transform(["etc-fold-quantized"]))
    # Pooling, concat and flatten keep their scale: they run on int8 values after folding.
    def operand_types(line):
        return line.split(" : (", 1)[1].split(") ->", 1)[0] if " : (" in line else ""

    for op in ("max_pool2d_with_indices", "cat", "view"):
        assert any(f'"edge.{op}"' in line and "xi8>" in operand_types(line) for line in text.splitlines()), op
    assert sqnr(want, _run(edge.to_executorch(), zoo_model.example_inputs)[0]) >= 30


def test_module_type_and_name_overrides_leave_those_modules_in_float():
    from etc.targets.cpu import CpuQuantizer, get_symmetric_quantization_config

    config = get_symmetric_quantization_config(is_per_channel=True)
    quantizer = CpuQuantizer().set_global(config).set_module_type(nn.Linear, None).set_module_name("conv", None)
    converted, _ = quantize(_everything(), quantizer=quantizer)
    graph = converted.graph
    for node in graph.nodes:
        if str(node.target) == "aten.linear.default":
            assert "dequantize" not in str(node.args[1].target)  # float weight
    first, depthwise = [n for n in graph.nodes if str(n.target) == "aten.conv2d.default"]
    assert first.args[0].op == "placeholder"  # `conv` left in float
    assert "dequantize" in str(depthwise.args[1].target)  # the rest quantized

    by_operator = CpuQuantizer().set_global(config).set_operator_type(torch.ops.aten.conv2d, None)
    converted, _ = quantize(_everything(), quantizer=by_operator)
    convs = [n for n in converted.graph.nodes if str(n.target) == "aten.conv2d.default"]
    assert all("dequantize" not in str(n.args[1].target) for n in convs)
    linears = [n for n in converted.graph.nodes if str(n.target) == "aten.linear.default"]
    assert all("dequantize" in str(n.args[1].target) for n in linears)


def test_unsupported_scheme_names_the_op_and_the_users_line():
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e
    from torchao.quantization.pt2e.quantizer import QuantizationConfig, QuantizationSpec

    from etc.targets.cpu import CpuQuantizer, get_symmetric_quantization_config

    base = get_symmetric_quantization_config()
    uint4_weights = QuantizationSpec(dtype=torch.uint8, quant_min=0, quant_max=15, qscheme=torch.per_tensor_affine,
                                     observer_or_fake_quant_ctr=MinMaxObserver)
    bad = QuantizationConfig(base.input_activation, base.output_activation, uint4_weights, None)
    with pytest.raises(UnsupportedConstructError, match="weight torch.uint8 torch.per_tensor_affine"):
        CpuQuantizer().set_global(bad)

    class Uint4Quantizer(CpuQuantizer):  # a config that slipped past set_global is caught per op
        def set_global(self, config):
            self.global_config = config
            return self

    zoo_model = ZOO["small_cnn"]()
    captured = torch.export.export(zoo_model.module, zoo_model.example_inputs).module()
    with pytest.raises(UnsupportedConstructError) as info:
        prepare_pt2e(captured, Uint4Quantizer().set_global(bad))
    assert "aten.conv2d.default" in str(info.value)
    assert "zoo.py" in str(info.value.location)  # the model's line, not ours


# ------------------------------------------------------------------ torchao LLM configs
def _torchao_config(kind):
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerAxis, PerGroup

    if kind == "8da4w":
        return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
    if kind == "8da8w":
        return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    return IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))


@pytest.mark.parametrize("kind", ["8da4w", "8da8w", "int8_weight_only"])
def test_torchao_llm_configs_import_and_run(kind):
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16)).eval()
    quantize_(model, _torchao_config(kind))
    x = torch.randn(3, 64)
    edge = etc.to_edge(torch.export.export(model, (x,)))
    text = str(edge)
    assert "edge.torchao_dequantize_affine" in text
    assert ("edge.torchao_choose_qparams_affine" in text) == (kind != "int8_weight_only")
    shapes = {a.shape for a in edge.program_ir.constants.values() if a.dtype == "int8"}
    assert {(16, 32), (32, 64)} <= shapes  # weights stored once, as int8
    got = _run(edge.to_executorch(), (x,))[0]
    with torch.no_grad():
        want = model(x)
    assert sqnr(want, got) >= 60


# ------------------------------------------------------------------ cpu target
class _FloatHead(nn.Module):
    """Float ops the quantizer leaves alone, a quantized conv block, then a float head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.conv(torch.exp(torch.tanh(x)))).mean(dim=(2, 3))
        return torch.sigmoid(self.head(y))


def test_cpu_partitioner_runs_quantized_operations_as_int8_next_to_float_ones():
    from etc.targets.cpu import CpuPartitioner, CpuQuantizer, get_symmetric_quantization_config
    from etc.models.zoo import ZooModel

    torch.manual_seed(0)
    zoo_model = ZooModel("float_head", _FloatHead().eval(), (torch.randn(1, 3, 8, 8),))
    quantizer = CpuQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    quantizer.set_module_name("head", None)
    converted, ep = quantize(zoo_model, quantizer=quantizer)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    # The partitioner folds the int8 computation and delegates it with the float ops around it.
    assert "0 op(s) on portable kernels" in report
    assert "delegated  edge.etc_quantized_conv2d x1" in report
    assert "delegated  edge.quantized_decomposed_quantize_per_tensor" in report
    assert "delegated  edge.tanh x1" in report and "delegated  edge.sigmoid x1" in report
    assert "edge.convolution" not in report
    got = _run(edge.to_executorch(), zoo_model.example_inputs)[0]
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs)
    assert sqnr(want, got) >= 30


# ------------------------------------------------------------------ etc-fold-quantized
@pytest.mark.parametrize("kind", ["8da4w", "8da8w", "int8_weight_only"])
def test_fold_quantized_torchao_linears_pack_int4_weights_once(kind):
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16)).eval()
    quantize_(model, _torchao_config(kind))
    x = torch.randn(3, 64)
    edge = etc.to_edge(torch.export.export(model, (x,))).transform(["etc-fold-quantized"])
    text = str(edge)
    assert text.count("edge.etc_quantized_linear_dynamic") == 2 and "torchao_" not in text
    weights = {a.shape: a.dtype for a in edge.program_ir.constants.values() if a.dtype in ("uint8", "int8")}
    if kind == "8da4w":  # two 4-bit values per byte
        assert weights == {(32, 32): np.uint8, (16, 16): np.uint8}
    else:
        assert {(32, 64), (16, 32)} <= set(weights)
    got = _run(edge.to_executorch(), (x,))[0]
    with torch.no_grad():
        want = model(x)
    assert sqnr(want, got) >= 60


class _SharedInput(nn.Module):
    """q, k and v of an attention: three linears reading one [B, T, K] input."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(64, 32), nn.Linear(64, 32), nn.Linear(64, 32)

    def forward(self, x):
        return self.q(x) + self.k(x) * self.v(x)


def test_fold_quantized_linears_sharing_a_quantized_input_each_keep_their_dynamic_activation():
    """The quantized input's view is shared after CSE: folding the first linear must not turn the
    others into weight-only (float activation) linears."""
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = _SharedInput().eval()
    quantize_(model, _torchao_config("8da4w"))
    x = torch.randn(1, 5, 64)
    edge = etc.to_edge(torch.export.export(model, (x,))).transform(["etc-fold-quantized"])
    text = str(edge)
    assert text.count('activation_granularity = "per_row"') == 3 and "torchao_" not in text
    got = _run(edge.to_executorch(), (x,))[0]
    with torch.no_grad():
        want = model(x)
    assert sqnr(want, got) >= 60


def test_int4_packing_round_trips():
    from etc.runtime.kernels.quantized import pack_int4, unpack_int4

    values = np.random.default_rng(0).integers(-8, 8, size=(5, 7)).astype(np.int8)
    packed = pack_int4(values)
    assert packed.dtype == np.uint8 and packed.shape == (5, 4)
    np.testing.assert_array_equal(unpack_int4(packed, 7), values)


def test_a_quantization_op_etc_has_no_kernel_for_is_an_error_at_the_users_line():
    import torch.ao.quantization.fx._decomposed  # noqa: F401

    class SymmetricPerToken(nn.Module):
        def forward(self, x):
            scales, _ = torch.ops.quantized_decomposed.choose_qparams_per_token(x, torch.int8)
            return x * scales

    with pytest.raises(UnsupportedConstructError) as info:
        etc.to_edge(torch.export.export(SymmetricPerToken(), (torch.randn(2, 4),)))
    assert "quantization operator quantized_decomposed::choose_qparams_per_token is not supported" in str(info.value)
    assert "test_quantization.py" in str(info.value.location)


class _MLPBlock(nn.Module):
    """An LLM feed-forward on [1, T, D] activations (each linear is view -> mm -> view)."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 128, bias=False)
        self.down = nn.Linear(128, 64, bias=False)

    def forward(self, x):
        return self.down(nn.functional.silu(self.up(x)))


@pytest.mark.parametrize("fold", [False, True])
def test_torchao_8da4w_decoder_block_with_a_dynamic_sequence_length(fold):
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = _MLPBlock().eval()
    quantize_(model, _torchao_config("8da4w"))
    seq = torch.export.Dim("seq", min=1, max=16)
    edge = etc.to_edge(torch.export.export(model, (torch.randn(1, 5, 64),), dynamic_shapes=({1: seq},)))
    if fold:
        text = str(edge.transform(["etc-fold-quantized"]))
        # The activation stays quantized per row through the view (not silently weight-only).
        assert text.count('activation_granularity = "per_row"') == 2 and "torchao_" not in text
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for length in (1, 7, 16):
        x = torch.randn(1, length, 64)
        with torch.no_grad():
            want = model(x)
        assert sqnr(want, method.execute([x])[0]) >= 60, length


def test_torchao_8da4w_llama_exports_with_etc_llm_and_matches_eager():
    """The LLM path end to end: a Llama with its Linears quantized by torchao (int4 weights in
    groups of 32, dynamic int8 activations), exported by etc.llm with its KV cache."""
    import copy

    from torchao.quantization import quantize_

    from etc.llm.export import export_llm
    from etc.llm.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    model = Llama(LlamaConfig(n_layers=1, full_logits=True)).eval()
    quantize_(model, _torchao_config("8da4w"), filter_fn=lambda module, fqn: isinstance(module, nn.Linear))
    reference = copy.deepcopy(model)  # the export runs the model: its cache must start empty here too
    program = export_llm(model, max_seq_len=8)
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    tokens, positions = torch.randint(0, 512, (1, 5)), torch.arange(5)
    with torch.no_grad():
        want = reference(tokens, positions)
    assert sqnr(want, method.execute([tokens, positions])[0]) >= 60
