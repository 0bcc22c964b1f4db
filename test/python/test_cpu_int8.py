"""Int8 native code in the cpu target (issue 10, part 3): quantized programs fully delegated, their
int8 ops lowered by targets/cpu/lowering/quantized*.py (etc-cpu-lower-quantized) and the contractions run by the vpdpbusd kernel
of passes/int8_kernels.py, checked against etc's portable int8 kernels (the reference semantics)
and the eager quantized model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("torchao")

import etc  # noqa: E402
from etc.runtime import Runtime  # noqa: E402
from etc.targets.cpu import CpuPartitioner  # noqa: E402
from etc.models.quantized import quantize, quantized_zoo, sqnr  # noqa: E402
from etc.models.zoo import ZooModel  # noqa: E402
from cpu_target_helpers import host_has  # noqa: E402

CNNS = ["small_cnn", "mobilenet_v2", "mobilenet_v1_025", "resnet8", "kws_dscnn"]



def _run(program, inputs):
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    return [np.asarray(o) for o in method.execute(list(inputs))]


def _output_scale(ep) -> float:
    """The scale of the program's last dequantize (its output's int8 step)."""
    nodes = [n for n in ep.graph.nodes if n.op == "call_function" and "dequantize_per_tensor" in str(n.target)]
    return float(nodes[-1].args[1])


def _within_one_step(got, want, step):
    """The kernel scales in float32 with one fma where the reference kernel rounds a float64
    product: an int8 output may differ by one step where the two land on either side of a
    rounding tie, never by more, and rarely."""
    diff = np.abs(got - want) / step
    assert diff.max() <= 1.0 + 1e-3, diff.max()
    assert np.count_nonzero(diff > 0.5) <= max(2, diff.size // 100)


@pytest.mark.parametrize("name", CNNS)
def test_zoo_cnn_int8_is_fully_delegated_and_matches_the_portable_int8_kernels(name):
    zoo_model, converted, ep = quantized_zoo(name)
    inputs = zoo_model.example_inputs
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "0 op(s) on portable kernels" in report, report
    assert "delegated  edge.etc_quantized_conv2d" in report
    assert "tuned      convolution -> gemm" in report  # the vpdpbusd kernel (or the AVX-VNNI one)
    got = _run(edge.to_executorch(), inputs)[0]
    portable = _run(etc.to_edge(ep).transform(["etc-fold-quantized"]).to_executorch(), inputs)[0]
    _within_one_step(got, portable, _output_scale(ep))
    with torch.no_grad():
        want = converted(*inputs)
    assert sqnr(want, torch.as_tensor(got)) >= 30


class _Conv(nn.Module):
    def __init__(self, c, f, k, stride, padding, groups=1, relu=True, dilation=1):
        super().__init__()
        self.conv = nn.Conv2d(c, f, k, stride=stride, padding=padding, groups=groups, dilation=dilation)
        self.relu = relu

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y) if self.relu else y


class _Linear(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x):
        return self.linear(x)


def _quantized(module, shape, sign, seed=0):
    """Quantize `module` calibrated on inputs of one sign: all >= 0 puts the input zero point at
    -128, all <= 0 at 127, both signs in between."""
    torch.manual_seed(seed)
    x = torch.randn(*shape)
    x = x.abs() if sign > 0 else -x.abs() if sign < 0 else x
    zoo_model = ZooModel("layer", module.eval(), (x,))
    converted, ep = quantize(zoo_model, calibration_batches=0)
    return converted, ep, x


def _check_layer(module, shape, sign, *, partitioner=None, expect=("gemm",)):
    converted, ep, x = _quantized(module, shape, sign)
    zps = [int(n.args[2]) for n in ep.graph.nodes if "quantize_per_tensor" in str(n.target)]
    if sign > 0:
        assert -128 in zps
    if sign < 0:
        assert 127 in zps
    edge = etc.to_edge(ep).to_backend(partitioner or CpuPartitioner())
    report = edge.delegation_info()
    assert "0 op(s) on portable kernels" in report, report
    for path in expect:
        assert f"-> {path}" in report, report
    got = _run(edge.to_executorch(), [x])[0]
    want = _run(etc.to_edge(ep).transform(["etc-fold-quantized"]).to_executorch(), [x])[0]
    _within_one_step(got, want, _output_scale(ep))
    with torch.no_grad():
        assert sqnr(converted(x), torch.as_tensor(got)) >= 30
    return report


@pytest.mark.parametrize("c,f,k,stride,padding,hw", [
    (3, 16, 3, 1, 1, 8),      # K = 27 (not a multiple of 4), P = 64
    (5, 7, 3, 2, 1, 11),      # odd channels, F < mr, P = 36 (a partial panel)
    (17, 70, 1, 1, 0, 9),     # 1x1, F = 70 (row tail), P = 81
    (8, 13, 5, 1, 2, 13),     # 5x5, P = 169: whole panel groups, then a partial panel
    (16, 96, 3, 1, 1, 16),    # P = 256: panel groups only
    (40, 6, 3, 1, 1, 7),      # P = 49 (a 7x7 map: one column in the last panel), K = 360
    (9, 66, 1, 1, 0, 14),     # P = 196 (14x14: 4 columns in the last panel), K = 9, F = 4 * 16 + 2
])
@pytest.mark.parametrize("sign", [1, -1, 0])
def test_int8_conv_kernel_against_the_portable_reference(c, f, k, stride, padding, hw, sign):
    _check_layer(_Conv(c, f, k, stride, padding), (1, c, hw, hw), sign, expect=("gemm",))


@pytest.mark.parametrize("c,f,k,stride,padding,hw,dilation", [
    (16, 16, 3, 1, 1, 32, 1),  # ResNet-8's: output rows of 32 (a period of 2 panels), K = 144
    (4, 8, 3, 2, 1, 32, 1),    # stride 2: every other byte of 32-byte loads, rows of 16
    (3, 8, 7, 2, 3, 20, 1),    # a 7x7 stride-2 stem: K = 147 (K padded), rows of 10 (a period of 5 panels)
    (6, 5, 3, 1, 2, 9, 2),     # dilation 2
    (1, 4, 1, 1, 0, 3, 1),     # a 9-byte image: smaller than one load, every load masked, P < 16
    (64, 20, 3, 1, 1, 7, 1),   # rows of 7 (several per panel), K = 576 in 144 groups
    (256, 12, 1, 1, 0, 18, 1),  # a 1x1 on 256 channels (rows 4 KiB apart): two periods of 9 panels, 3 after
])
def test_int8_conv_packs_its_im2col_from_the_image(c, f, k, stride, padding, hw, dilation):
    """The im2col is packed straight from the (padded) image: panels crossing output rows, strides,
    dilations, K and P padding, loads near the image's end masked."""
    _check_layer(_Conv(c, f, k, stride, padding, dilation=dilation), (1, c, hw, hw), 0, expect=("gemm",))


@pytest.mark.parametrize("c,f,k,padding,hw,dilation", [
    (4, 8, 3, 1, (8, 8), 1),      # the fewest channels: one plane per column tap, P = 64
    (8, 20, 3, 1, (6, 21), 1),    # rows of 21 (panels cross them), P = 126: a partial last panel
    (12, 7, 3, 2, (11, 11), 2),   # dilation 2, P = 121 (9 columns in the last panel), F < mr
    (16, 9, 5, 2, (8, 12), 1),    # 5x5 taps, rows of 12
    (8, 16, 3, 0, (10, 18), 1),   # no padding: rows of 16 from an image 18 wide
])
@pytest.mark.parametrize("sign", [1, 0])
def test_stride_one_convs_read_their_panels_in_place(c, f, k, padding, hw, dilation, sign):
    """K tap by tap (channels by fours, stride 1, no tail columns): the kernel reads each panel
    row from the image's channel-interleaved copies, 16 consecutive words across output rows."""
    from etc.targets.cpu.kernels.int8_match import taps_first

    oh, ow = ((n + 2 * padding - dilation * (k - 1)) for n in hw)
    assert taps_first(c, k, k, (1, 1), oh * ow)
    _check_layer(_Conv(c, f, k, 1, padding, dilation=dilation), (1, c, *hw), sign, expect=("gemm",))


def _random_in_place_geometries(count: int, seed: int = 1800) -> list:
    """Convolutions `int8_match.taps_first` takes, drawn at random: channels by fours, kernels 2-5
    wide or tall, dilations, paddings 0-2, odd and wide images."""
    from etc.targets.cpu.kernels.int8_match import taps_first

    rng, out = np.random.default_rng(seed), []
    while len(out) < count:
        c, f = 4 * int(rng.integers(1, 7)), int(rng.integers(1, 40))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        d, pad = int(rng.integers(1, 3)), int(rng.integers(0, 3))
        h, w = int(rng.integers(3, 20)), int(rng.integers(3, 40))
        oh, ow = h + 2 * pad - d * (kh - 1), w + 2 * pad - d * (kw - 1)
        if oh > 0 and ow > 0 and taps_first(c, kh, kw, (1, 1), oh * ow):
            out.append((c, f, (kh, kw), pad, (h, w), d))
    return out


@pytest.mark.parametrize("c,f,k,padding,hw,dilation", _random_in_place_geometries(16))
def test_random_convs_read_in_place_match_the_reference(c, f, k, padding, hw, dilation):
    """A random generator of geometries finds what the listed cases miss (it found a one-row
    kernel, KW = 1, taking the whole-rows layout's panel starts)."""
    _check_layer(_Conv(c, f, k, 1, padding, dilation=dilation), (1, c, *hw), 0, expect=("gemm",))


# An x86-64 core without AVX2 (x86-64-v2): no int8 dot product at all, plain loops.
NO_DOT_TARGET = dict(target="x86_64-unknown-linux-gnu", cpu="nehalem", features="+sse4.2,+popcnt")
# AVX2 without VNNI (Zen 1-3, Skylake to Comet Lake): vpdpbusd as two vpmaddwd.
MADD_TARGET = dict(target="x86_64-unknown-linux-gnu", cpu="znver3", features="+avx2,+fma,+f16c")


@pytest.mark.skipif(not host_has("sse4.2"), reason="runs x86-64-v2 code")
@pytest.mark.parametrize("c,f,k,padding,hw,dilation", _random_in_place_geometries(3, seed=1801))
def test_convs_with_k_tap_by_tap_without_a_dot_product_pack_k_in_that_order(c, f, k, padding, hw, dilation):
    """Where the kernel cannot read in place (no dot product: plain loops) the pack gathers K tap by tap."""
    _check_layer(_Conv(c, f, k, 1, padding, dilation=dilation), (1, c, *hw), 0,
                 partitioner=CpuPartitioner(**NO_DOT_TARGET), expect=("loops",))


@pytest.mark.skipif(not host_has("avx2", "fma"), reason="runs AVX2 code")
@pytest.mark.parametrize("c,f,k,stride,hw", [
    (6, 13, 3, 1, (8, 5)),     # 2 tail columns, F = 13 (row tiles of 6, 6, 1), K = 54: one masked run
    (16, 20, 3, 1, (7, 7)),    # 1 tail column, K = 144
    (8, 70, 1, 1, (5, 6)),     # 1x1, a partial panel
    (8, 13, 3, 1, (8, 6)),     # read in place (K tap by tap, 48 positions: 3 whole panels)
    (3, 24, 7, 2, (20, 20)),   # a 7x7 stride-2 stem: K = 147 padded
    (64, 12, 3, 1, (14, 14)),  # K = 576: many groups, ResNet's 14 x 14 tail
])
@pytest.mark.parametrize("sign", [1, -1])
def test_avx2_kernel_without_vnni_matches_the_reference(c, f, k, stride, hw, sign):
    """vpdpbusd as two vpmaddwd on the even and odd bytes widened to i16: exact for every byte pair
    (the sign cases put activations at both ends of u8 and the weights at both ends of i8)."""
    _check_layer(_Conv(c, f, k, stride, k // 2), (1, c, *hw), sign, partitioner=CpuPartitioner(**MADD_TARGET),
                 expect=("gemm",))


@pytest.mark.skipif(not host_has("avx2", "fma"), reason="runs AVX2 code")
@pytest.mark.parametrize("c,f,k,padding,hw,dilation", _random_in_place_geometries(6, seed=1900))
def test_random_avx2_convs_without_vnni_match_the_reference(c, f, k, padding, hw, dilation):
    _check_layer(_Conv(c, f, k, 1, padding, dilation=dilation), (1, c, *hw), 0,
                 partitioner=CpuPartitioner(**MADD_TARGET), expect=("gemm",))


def test_in_place_convs_on_two_threads_give_one_threads_bytes():
    """The copies' planes and the kernel's panel groups are shared between threads."""
    from etc.compiler.delegation import CompileSpec

    _, ep, x = _quantized(_Conv(16, 24, 3, 1, 1), (1, 16, 16, 16), 0)
    one = _run(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch(), [x])[0]
    for threads in (2, 3):
        edge = etc.to_edge(ep).to_backend(CpuPartitioner(
            num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")]))
        report = edge.delegation_info()
        assert "no loop of the nest is marked" not in report, report
        program = edge.to_executorch()
        for _ in range(5):  # a race would show now and then
            np.testing.assert_array_equal(_run(program, [x])[0], one)


@pytest.mark.parametrize("padding,k,groups,path", [("same", 1, 1, "gemm"), ("valid", 3, 1, "gemm"),
                                                    ("valid", 3, 6, "window")])
def test_int8_conv_with_padding_by_name(padding, k, groups, path):
    """`padding="valid"` (transformers' EfficientNet) exports ATen's padding of one value, which
    stands for both dims."""
    _check_layer(_Conv(6, 6, k, 1, padding, groups=groups), (1, 6, 9, 9), 0, expect=(path,))


class _PaddedConvs(nn.Module):
    """transformers' MobileNetV2 (TF's "same" padding): conv -> ReLU6 -> zero pad -> strided conv."""

    def __init__(self, c, groups, value=0.0):
        super().__init__()
        self.first = nn.Conv2d(c, c, 1)
        self.second = nn.Conv2d(c, c, 3, stride=2, groups=groups)
        self.value = value

    def forward(self, x):
        y = nn.functional.hardtanh(self.first(x), 0.0, 6.0)
        return self.second(nn.functional.pad(y, (0, 1, 0, 1), value=self.value))  # 8 -> 9: the last window reads it


@pytest.mark.parametrize("groups", [1, 8])
def test_zero_padding_runs_on_int8_filled_with_the_zero_point(groups):
    """Zero padding shares its input's scale (CpuQuantizer) and runs on the int8 values, filled
    with the zero point (-128 after a ReLU6: a fill of 0 would be wrong): no float round trip."""
    report = _check_layer(_PaddedConvs(8, groups), (1, 8, 8, 8), 0, expect=("window" if groups > 1 else "gemm",))
    assert "quantize_per_tensor x1" in report and "dequantize_per_tensor x1" in report, report
    assert "constant_pad_nd x1" in report, report


def test_nonzero_padding_stays_a_float_round_trip():
    report = _check_layer(_PaddedConvs(8, 1, value=0.5), (1, 8, 8, 8), 0)
    assert "quantize_per_tensor x2" in report, report


def test_int8_conv_without_relu_and_batch_two():
    _check_layer(_Conv(6, 10, 3, 1, 1, relu=False), (2, 6, 7, 7), 0)


@pytest.mark.parametrize("m,k,n", [(1, 5, 17), (3, 33, 70), (7, 64, 16), (2, 130, 129)])
@pytest.mark.parametrize("sign", [1, -1, 0])
def test_int8_linear_kernel_against_the_portable_reference(m, k, n, sign):
    _check_layer(_Linear(k, n), (m, k), sign, expect=("gemm",))


@pytest.mark.parametrize("c,k,stride,sign", [(8, 3, 1, 0), (5, 3, 2, 1), (16, 5, 1, -1), (3, 3, 2, 0)])
def test_int8_depthwise_runs_exactly_on_the_f32_window_kernel(c, k, stride, sign):
    """Integer taps summed in float32 are exact below 2^24: the tuned f32 window kernel computes
    the int8 accumulator, its zero padding and the requantization folded into the kernel."""
    report = _check_layer(_Conv(c, c, k, stride, k // 2, groups=c), (1, c, 11, 11), sign, expect=("window",))
    assert "NOT TUNED" not in report and "epilogue -> fused" in report


class _ConvPool(nn.Module):
    """A ResNet stem in miniature: conv + ReLU, then a max pool the quantized graph keeps on int8."""

    def __init__(self, c, f, k, stride, padding, ceil_mode=False):
        super().__init__()
        self.conv = nn.Conv2d(c, f, 3, padding=1)
        self.pool = nn.MaxPool2d(k, stride, padding, ceil_mode=ceil_mode)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(x)))


@pytest.mark.parametrize("c,k,stride,padding,h,w,sign", [
    (3, 3, 2, 1, 17, 17, 0),     # the stem's 3x3 / 2 with padding, odd size
    (2, 2, 2, 0, 12, 70, 1),     # 2x2 / 2 into 35 columns: one partial 64-lane vector
    (4, 3, 2, 1, 9, 131, -1),    # 66 columns: a full vector and a 2-wide tail
    (3, 3, 1, 1, 7, 20, 0),      # stride 1
])
def test_int8_max_pool_is_a_window_kernel_on_int8(c, k, stride, padding, h, w, sign):
    """The max pool of a quantized model runs on int8 values (its scale is its input's): the
    window kernel on 64 int8 lanes, padding with -128 folded, the same values as the portable
    int8 kernels."""
    report = _check_layer(_ConvPool(c, 8, k, stride, padding), (1, c, h, w), sign, expect=("gemm", "window"))
    assert "NOT TUNED" not in report, report


def test_int8_depthwise_with_a_channel_multiplier_is_plain_loops_with_a_reason():
    report = _check_layer(_Conv(4, 8, 3, 1, 1, groups=4), (1, 4, 9, 9), 0, expect=())
    assert "NOT TUNED  window -> loops: int8 depthwise/grouped convolution" in report


def test_grouped_int8_conv():
    _check_layer(_Conv(8, 12, 3, 1, 1, groups=4), (1, 8, 6, 6), 1, expect=())


@pytest.mark.skipif(not host_has("sse4.2"), reason="runs x86-64-v2 code")
def test_without_a_dot_product_the_contractions_are_plain_loops_and_say_why():
    report = _check_layer(_Conv(8, 16, 3, 1, 1), (1, 8, 8, 8), 0, partitioner=CpuPartitioner(**NO_DOT_TARGET),
                          expect=())
    assert "NOT TUNED  convolution -> loops: the target has no int8 dot product" in report


@pytest.mark.parametrize("c,f,k,hw", [
    (6, 13, 3, (8, 5)),   # P = 18: 2 tail columns; F = 13 rows (two tiles of 6 and one), K = 54 (one masked run)
    (32, 7, 3, (9, 9)),   # P = 81: 5 panels and 1 column, K = 288 (4 runs of 64 and one of 32)
    (16, 4, 1, (6, 4)),   # P = 24: 8 tail columns (half a panel), 1x1: K = 16
    (64, 9, 3, (5, 5)),   # P = 25: 9 columns are more than half a panel: padded, no tail
])
def test_int8_conv_tail_columns_are_dot_products_along_k(c, f, k, hw, monkeypatch):
    """The last panel's few columns (at most half of it) are dot products along K after the
    panels (the pack writes them column by column): the same bytes as the padded panel gives."""
    from etc.targets.cpu.passes import int8_kernels

    module, shape = _Conv(c, f, k, 1, k // 2), (1, c, *hw)
    _check_layer(module, shape, 0, expect=("gemm",))
    _, ep, x = _quantized(module, shape, 0)
    with_tail = _run(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch(), [x])[0]
    monkeypatch.setattr(int8_kernels, "tail_columns", lambda columns: 0)
    padded = _run(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch(), [x])[0]
    np.testing.assert_array_equal(with_tail, padded)
    assert int8_kernels.PANEL == 16 and (hw[0] * hw[1]) % 16 <= 8 or hw == (5, 5)


def test_tail_columns_keep_one_copy_of_the_filter(monkeypatch):
    """The tail reads the filter as rows, the panels as 4-byte groups: one packed constant (a
    second layout would be a second copy: ResNet-18's program was twice XNNPACK's size)."""
    from etc.targets.cpu.passes import int8_kernels

    _, ep, _ = _quantized(_Conv(64, 64, 3, 1, 1), (1, 64, 7, 7), 0)  # a 36 KiB filter, P = 49
    with_tail = len(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch().buffer)
    monkeypatch.setattr(int8_kernels, "tail_columns", lambda columns: 0)
    padded = len(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch().buffer)
    assert abs(with_tail - padded) < 16 * 1024, (with_tail, padded)


class _Residual(nn.Module):
    """conv (+ ReLU) joined with a shortcut by an add (+ ReLU): ResNet's block end, the conv's
    result the add's first or second operand."""

    def __init__(self, c, k, conv_first, conv_relu, add_relu):
        super().__init__()
        self.conv = nn.Conv2d(c, c, k, padding=k // 2)
        self.conv_first, self.conv_relu, self.add_relu = conv_first, conv_relu, add_relu

    def forward(self, x, shortcut):
        y = self.conv(x)
        y = torch.relu(y) if self.conv_relu else y
        y = y + shortcut if self.conv_first else shortcut + y
        return torch.relu(y) if self.add_relu else y


@pytest.mark.parametrize("c,k,hw,conv_first,conv_relu,add_relu", [
    (16, 3, (8, 8), True, False, True),     # ResNet's: conv, add, ReLU
    (16, 3, (7, 7), False, False, False),   # the conv second; a 7x7 map: one tail column
    (24, 1, (14, 14), True, True, False),   # the conv's own ReLU clamps before the add; 4 tail columns
    (8, 3, (5, 9), False, True, True),      # P = 45: a partial last panel, masked residual reads
])
def test_int8_add_fused_into_the_conv_epilogue(c, k, hw, conv_first, conv_relu, add_relu, monkeypatch):
    """An int8 add reading a conv's result is computed in the conv kernel's epilogue: the same
    bytes as the separate add, and within one step of the portable kernels."""
    from etc.targets.cpu.passes import int8_kernels

    torch.manual_seed(0)
    x, shortcut = torch.randn(1, c, *hw), torch.randn(1, c, *hw) * 2
    zoo_model = ZooModel("block", _Residual(c, k, conv_first, conv_relu, add_relu).eval(), (x, shortcut))
    converted, ep = quantize(zoo_model, calibration_batches=0)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "0 op(s) on portable kernels" in report and "epilogue -> fused" in report, report
    fused = _run(edge.to_executorch(), [x, shortcut])[0]
    monkeypatch.setattr(int8_kernels, "match_residual_add", lambda requant: None)
    separate = _run(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch(), [x, shortcut])[0]
    np.testing.assert_array_equal(fused, separate)
    portable = _run(etc.to_edge(ep).transform(["etc-fold-quantized"]).to_executorch(), [x, shortcut])[0]
    _within_one_step(fused, portable, _output_scale(ep))
    with torch.no_grad():
        assert sqnr(converted(x, shortcut), torch.as_tensor(fused)) >= 30


class _ReluBesideSigned(nn.Module):
    """A ReLU conv concatenated with a signed one: the concatenation's shared scale and zero point
    put the ReLU conv's lower clamp (its zero point) above -128."""

    def __init__(self):
        super().__init__()
        self.relu_conv, self.conv = nn.Conv2d(8, 20, 3, padding=1), nn.Conv2d(8, 12, 1)
        self.linear = nn.Linear(32 * 36, 40)

    def forward(self, x):
        y = torch.cat([torch.relu(self.relu_conv(x)), self.conv(x)], dim=1)
        return self.linear(y.flatten(1))


def test_saturating_epilogue_matches_the_clamped_one(monkeypatch):
    """Rounding unclamped and letting the packs saturate (the lowering's `fits_i32` bound) gives the
    float clamp's bytes: a ReLU conv whose clamp starts above -128 (a byte max), a plain conv
    (saturation only), a linear."""
    import dataclasses

    from etc.targets.cpu.passes import int8_kernels

    _, ep, x = _quantized(_ReluBesideSigned(), (1, 8, 6, 6), 0)
    program = lambda: etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch()  # noqa: E731
    seen = []
    match = int8_kernels.match_qgemm

    def clamped(requant):
        pair = match(requant)
        seen.append((pair.fits_i32, pair.lo))
        return dataclasses.replace(pair, fits_i32=False)

    saturating = _run(program(), [x])[0]
    monkeypatch.setattr(int8_kernels, "match_qgemm", clamped)
    np.testing.assert_array_equal(saturating, _run(program(), [x])[0])
    assert seen and all(fits for fits, _ in seen)
    assert any(lo > -128 for _, lo in seen), seen


class _ThreadedBlock(nn.Module):
    """The int8 kernel's every form: a 3x3 conv at 14x14 (panel groups, then 4 tail columns; the
    pack's periods, then its last panels), a residual add in its epilogue, a strided conv to 7x7
    (whole panels outside the group loop, one tail column), a linear over 100 columns."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 40, 3, stride=2, padding=1)
        self.linear = nn.Linear(40 * 49, 100)

    def forward(self, x):
        y = torch.relu(self.conv1(x) + x)
        return self.linear(torch.relu(self.conv2(y)).flatten(1))


@pytest.mark.parametrize("dynamic", [False, True])
def test_int8_kernels_share_their_loops_between_threads(dynamic):
    """Compiled for two threads, the int8 kernels' independent loops (the pack's periods and rows
    of K, the panel groups, the last panels' row tiles, the tail columns' row tiles; a dynamic
    linear's panel groups, its rows quantized per call when each has its own range) are shared:
    no int8 nest is left on thread 0 for want of a marked loop but a per-tensor range (a tile's
    left-over rows, a loop along K, still are, and the report says so), and 2 and 3 threads give
    one thread's bytes."""
    from etc.compiler.delegation import CompileSpec

    UNMARKED = "no loop of the nest is marked etc.thread_split (independent iterations)"

    if dynamic:
        torch.manual_seed(0)
        x = torch.randn(1, 8, 256)
        _, ep = quantize(ZooModel("linear", _Linear(256, 200).eval(), (x,)), is_dynamic=True)
    else:
        _, ep, x = _quantized(_ThreadedBlock(), (1, 16, 14, 14), 0)
    one = _run(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch(), [x])[0]
    for threads in (2, 3):
        edge = etc.to_edge(ep).to_backend(CpuPartitioner(
            num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")]))
        report = edge.delegation_info()
        assert "0 op(s) on portable kernels" in report, report
        assert dynamic or "epilogue -> fused" in report, report
        unmarked = [line for line in report.splitlines() if "no loop of the nest is marked" in line]
        # a per-tensor dynamic activation's range is one reduction, and its rows read what it found
        assert unmarked == ([f"    NOT TUNED  threads -> one-thread: a loop nest runs on thread 0: {UNMARKED} x1"]
                            if dynamic else []), report
        program = edge.to_executorch()
        for _ in range(5):  # a race would show now and then
            np.testing.assert_array_equal(_run(program, [x])[0], one)


@pytest.mark.skipif(not host_has("avxvnni"), reason="the host has no AVX-VNNI")
@pytest.mark.parametrize("c,f,k,hw", [(6, 13, 3, (8, 5)), (16, 20, 3, (7, 7)), (8, 70, 1, (5, 6)), (8, 13, 3, (8, 6))])
def test_avx_vnni_kernel_matches_the_reference(c, f, k, hw):
    """The 256-bit kernel (8-lane dot products, the AVX2 packs with their own lane order, round
    then convert) on an AVX-VNNI target without AVX-512, tail columns and panels read in place included."""
    partitioner = CpuPartitioner("x86_64-unknown-linux-gnu", cpu="alderlake", features="+avx2,+fma,+f16c,+avxvnni")
    _check_layer(_Conv(c, f, k, 1, k // 2), (1, c, *hw), 0, partitioner=partitioner, expect=("gemm",))


def _assembly(module, x, **target) -> str:
    """The cpu target's object code for `module` quantized, as assembly."""
    import llvmlite.binding as llvm

    from etc.targets.cpu import compile_function
    from etc.targets.cpu.isa import init_llvm, resolve_target

    _, ep, _ = _quantized(module, x, 0)
    edge = etc.to_edge(ep)

    edge.transform(CpuPartitioner.pipeline)  # the quantized computations folded, as to_backend does
    fn = [op for op in edge.program_ir.module.body.operations if op.operation.name == "func.func"][0]
    _, debug = compile_function(fn.operation, edge.program_ir.constants, keep_ir=True, **target)
    init_llvm()
    resolved = resolve_target(target.get("target"), cpu=target.get("cpu"), features=target.get("features"))
    tm = llvm.Target.from_triple(resolved.triple).create_target_machine(cpu=resolved.cpu,
                                                                         features=resolved.features, opt=3)
    return tm.emit_assembly(llvm.parse_assembly(debug["llvm_ir"]))


@pytest.mark.skipif(not host_has("avx512vnni", "avx512bw"), reason="the host has no AVX-512 VNNI")
def test_host_kernel_is_avx512_vnni():
    asm = _assembly(_Conv(16, 32, 3, 1, 1), (1, 16, 8, 8))
    lines = [line for line in asm.splitlines() if "vpdpbusd" in line]
    assert lines and all("%zmm" in line for line in lines)


def test_avx2_kernel_without_vnni_uses_ymm_pair_products():
    asm = _assembly(_Conv(16, 32, 3, 1, 1), (1, 16, 8, 8), **MADD_TARGET)
    lines = [line for line in asm.splitlines() if "vpmaddwd" in line]
    assert lines and all("%ymm" in line for line in lines)
    assert "vpdpbusd" not in asm and "%zmm" not in asm


def test_avx_vnni_kernel_uses_ymm_dot_products():
    asm = _assembly(_Conv(16, 32, 3, 1, 1), (1, 16, 8, 8), target="x86_64-unknown-linux-gnu", cpu="alderlake",
                    features="+avx2,+fma,+f16c,+avxvnni")
    lines = [line for line in asm.splitlines() if "vpdpbusd" in line]
    assert lines and all("%ymm" in line and "%zmm" not in line for line in lines)


def test_isa_rows_choose_the_dot_product_from_the_features():
    from etc.targets.cpu.isa import CpuTarget, isa_for

    x86 = "x86_64-unknown-linux-gnu"
    assert isa_for(CpuTarget(x86, "x", "+avx512f,+avx512bw,+avx512vnni,+avx2,+fma")).int8_dot == "avx512-vnni"
    assert isa_for(CpuTarget(x86, "x", "+avx512f,+avx2,+fma")).int8_dot == "avx2-madd"  # Skylake-SP
    assert isa_for(CpuTarget(x86, "x", "+avx512f,+avx512bw,+avx512vnni,+avx2,+fma,+avxvnni")).int8_dot == "avx512-vnni"
    assert isa_for(CpuTarget(x86, "x", "+avx2,+fma,+avxvnni")).int8_dot == "avx-vnni"
    assert isa_for(CpuTarget(x86, "x", "+avx2,+fma")).int8_dot == "avx2-madd"  # Zen 1-3, Skylake client
    assert isa_for(CpuTarget(x86, "x", "+sse4.2")).int8_dot == "none"
    assert isa_for(CpuTarget("aarch64-unknown-linux-gnu", "x", "+neon")).int8_dot == "none"


def test_zoo_mlp_with_the_dynamic_config_is_native_code():
    from etc.models.zoo import ZOO

    zoo_model = ZOO["mlp"]()
    converted, ep = quantize(zoo_model, is_dynamic=True)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "0 op(s) on portable kernels" in report and "delegated  edge.etc_quantized_linear_dynamic" in report
    got = _run(edge.to_executorch(), zoo_model.example_inputs)[0]
    with torch.no_grad():
        assert sqnr(converted(*zoo_model.example_inputs), torch.as_tensor(got)) >= 60


class _RowsMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.b = nn.Linear(8, 6)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + x


def test_int8_model_over_dynamic_sizes_matches_the_portable_int8_kernels():
    """Found by the compiler fuzzer: an int8 model exported with a dynamic dim failed to compile
    for the cpu target (its quantize, dequantize and add lowerings made `tensor.empty()` without
    the dynamic sizes). The elementwise int8 ops now take dynamic shapes; the int8 GEMMs stay on
    portable kernels for a dynamic shape, and the report says why."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from etc.targets.cpu import CpuQuantizer, get_symmetric_quantization_config

    torch.manual_seed(0)
    rows = torch.export.Dim("rows", min=1, max=9)
    example = (torch.randn(2, 3, 6),)
    shapes = ({1: rows},)
    captured = torch.export.export(_RowsMlp().eval(), example, dynamic_shapes=shapes).module()
    prepared = prepare_pt2e(captured, CpuQuantizer().set_global(get_symmetric_quantization_config()))
    for _ in range(3):
        prepared(torch.randn(2, 5, 6))
    ep = torch.export.export(convert_pt2e(prepared), example, dynamic_shapes=shapes)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "a dynamically shaped input (the cpu target's int8 GEMMs take static shapes)" in report, report
    assert "delegated  edge.quantized_decomposed_quantize_per_tensor" in report, report
    cpu = edge.to_executorch()
    portable = etc.to_edge(ep).transform(["etc-fold-quantized"]).to_executorch()
    for n in (1, 3, 9):
        x = torch.randn(2, n, 6)
        _within_one_step(_run(cpu, [x])[0], _run(portable, [x])[0], _output_scale(ep))
