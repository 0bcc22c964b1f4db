"""etc-cpu-window-kernels against torch: depthwise convolutions and poolings of every kernel size,
stride, padding and odd spatial size the pass takes, with and without fused consumers, run
through the pass and compiled to native code (etc.bench.window_jit), on random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from cpu_target_helpers import host_has, random_batchnorm
from etc.bench.window_jit import compile_model, linalg_of, run_window_pass


def check(model, shape, options="", atol=1e-5):
    torch.manual_seed(0)
    model = model.eval()
    x = torch.randn(*shape)
    fn, inputs, text = compile_model(model, x, options)
    assert 'etc.cpu.path = "window"' in text, text
    assert "loops:" not in text
    with torch.no_grad():
        want = model(x).numpy()
    got = fn(*inputs)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5)
    return text


DW = [  # (channels, kernel, stride, padding, dilation, H, W)
    (2, 3, 1, 1, 1, 7, 7),      # (one channel is a plain convolution, not a depthwise op)
    (3, 3, 2, 1, 1, 13, 17),
    (96, 3, 2, 1, 1, 28, 28),
    (8, 3, 1, 0, 1, 3, 3),      # 1x1 output
    (8, 5, 1, 2, 1, 14, 14),
    (5, 5, 2, 2, 1, 17, 13),
    (4, 7, 1, 3, 1, 7, 7),
    (6, 7, 2, 3, 1, 23, 19),
    (8, 3, 1, 2, 2, 12, 40),    # dilation 2
    (4, (1, 5), 1, (0, 2), 1, 9, 37),  # 1xk
    (16, 3, 1, 1, 1, 56, 57),   # several full vectors and a tail
]


@pytest.mark.parametrize("c,k,s,p,d,h,w", DW)
def test_depthwise(c, k, s, p, d, h, w):
    check(nn.Conv2d(c, c, k, s, p, dilation=d, groups=c), (1, c, h, w))


@pytest.mark.parametrize("c,k,s,p,d,h,w", DW[:6])
def test_depthwise_bn_relu6(c, k, s, p, d, h, w):
    text = check(nn.Sequential(nn.Conv2d(c, c, k, s, p, dilation=d, groups=c), random_batchnorm(c), nn.ReLU6()), (1, c, h, w))
    assert "consumer(s) fused" in text


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c,k,p,h,w,act", [
    (8, 3, 1, 14, 14, nn.SiLU()),      # EfficientNet's block: one vector per row, 8 rows per step
    (6, 5, 2, 7, 7, nn.SiLU()),        # a 7x7 map, 5x5 taps
    (5, 3, 1, 9, 13, nn.Sigmoid()),    # odd rows (a last step of fewer rows), a partial column block
    (4, 3, 1, 30, 72, nn.SiLU()),      # five column blocks: 4 rows per step (2 without the sigmoid)
])
def test_depthwise_bn_sigmoid_chains(threads, c, k, p, h, w, act):
    """A sigmoid after the taps is a long chain (`long_epilogue`, fused by the whole pipeline's
    elementwise fusion): at least 4 output rows per step and its division kept a division
    (`kernel_ir.LATENCY_BOUND`), on one and two threads: still torch's numbers."""
    import etc
    from etc.compiler.delegation import CompileSpec
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(c, c, k, 1, p, groups=c), random_batchnorm(c), act).eval()
    x = torch.randn(1, c, h, w)
    partitioner = CpuPartitioner(num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(partitioner)
    report = edge.delegation_info()
    assert "window -> window" in report and "epilogue -> fused" in report, report
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    with torch.no_grad():
        want = model(x).numpy()
    for _ in range(3):
        (got,) = method.execute([x.numpy()])
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("c,k,s,h,w,act,rows", [
    (4, 3, 1, 25, 5, nn.ReLU6(), 8),       # KWS: one 8-lane vector per row, steps of 8 then 7
    (3, 3, 1, 12, 3, nn.ReLU6(), 8),       # 3-wide rows, fewer interior rows than a step
    (5, 3, 1, 21, 28, nn.ReLU6(), 8),      # a stride-1 row of two vectors
    (6, 5, 1, 19, 60, nn.ReLU6(), 4),      # a stride-1 row of four vectors, 5x5 taps
    (3, 3, 1, 11, 90, nn.ReLU6(), 2),      # wider rows keep 2
    (3, 3, 1, 11, 90, nn.Hardswish(), 4),  # ... unless the epilogue is long (a division)
    (4, 3, 1, 14, 14, nn.GELU(), 2),       # erf's constants: 2 even on a one-vector row
    (4, 3, 2, 29, 27, nn.ReLU6(), 8),      # stride 2 into 14 columns (one vector)
    (3, 5, 2, 23, 57, nn.ReLU6(), 2),      # stride 2 into two vectors
    (2, 7, 1, 13, 9, nn.ReLU6(), 8),       # 7x7 taps: the kernel-row loop, 8 rows per step
])
def test_rows_per_step(c, k, s, h, w, act, rows):
    """Each branch of `window_kernel.rows_per_step` on odd shapes (a last step of fewer rows,
    padding rows, partial column blocks): the rule picks what the case names (16 lanes, the
    epilogue as the pipeline fuses it), and the whole pipeline's kernel gives torch's numbers."""
    import etc
    from torch_mlir import ir

    from etc.passes.pipeline import run_pipeline
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner
    from etc.targets.cpu.ir_query import walk
    from etc.targets.cpu.kernels.window_kernel import rows_per_step
    from etc.targets.cpu.kernels.window_match import analyze

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(c, c, k, s, k // 2, groups=c), random_batchnorm(c), act).eval()
    x = torch.randn(1, c, h, w)
    text, _ = linalg_of(model, x)
    with ir.Context():
        module = ir.Module.parse(text)
        run_pipeline(module, "builtin.module(etc-cpu-fuse-elementwise)")
        (op,) = walk(module.operation, ("linalg.depthwise_conv_2d_nchw_chw",))
        chosen = rows_per_step(analyze(op, max_stride=4), 16)
        del op, module
    assert chosen == rows
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "window -> window" in report and "epilogue -> fused" in report, report
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(method.execute([x.numpy()])[0], want, atol=1e-5, rtol=1e-5)


def test_depthwise_no_bias_batch2():
    check(nn.Conv2d(6, 6, 3, 2, 1, groups=6, bias=False), (2, 6, 15, 15))


@pytest.mark.parametrize("rows,lanes", [(1, 16), (3, 8), (4, 4)])
def test_options(rows, lanes):
    check(nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1, groups=8), nn.ReLU6()), (1, 8, 19, 23),
          options=f"{{rows={rows} lanes={lanes}}}")


@pytest.mark.parametrize("k,s,p,lanes", [(7, 1, 3, 4), (5, 2, 2, 4), (3, 2, 1, 8), (7, 2, 3, 16)])
def test_padding_across_blocks(k, s, p, lanes):
    """Padding wider than a vector's reach: several border blocks shift in the pad value."""
    check(nn.Sequential(nn.Conv2d(4, 4, k, s, p, groups=4), nn.ReLU()), (1, 4, 11, 29), options=f"{{lanes={lanes}}}")
    check(nn.MaxPool2d(k, s, p), (1, 4, 11, 29), options=f"{{lanes={lanes}}}")


def test_padding_kept_when_not_folded():
    check(nn.Conv2d(4, 4, 3, 2, 1, groups=4), (1, 4, 13, 13), options="{fold-padding=false}")


POOL = [  # (kind, kernel, stride, padding, C, H, W)
    ("max", 3, 2, 1, 64, 28, 28),
    ("max", 3, 2, 0, 3, 13, 17),
    ("max", 2, 2, 0, 1, 7, 7),
    ("max", 3, 1, 1, 96, 14, 14),
    ("max", 3, 2, 1, 4, 3, 3),      # 2x2 output from padding
    ("avg", 3, 2, 1, 64, 28, 28),
    ("avg", 2, 2, 0, 3, 13, 17),
    ("avg", 3, 1, 1, 1, 7, 7),
    ("avg", 2, 2, 0, 96, 14, 14),
]


@pytest.mark.parametrize("kind,k,s,p,c,h,w", POOL)
def test_pool(kind, k, s, p, c, h, w):
    model = nn.MaxPool2d(k, s, p) if kind == "max" else nn.AvgPool2d(k, s, p)
    check(model, (1, c, h, w))


def test_max_pool_then_relu6():
    check(nn.Sequential(nn.MaxPool2d(3, 2, 1), nn.ReLU6()), (1, 8, 15, 15))


def test_max_pool_nan_and_inf():
    """maximumf semantics: a NaN in the window wins (as torch), -inf padding never does."""
    torch.manual_seed(0)
    model = nn.MaxPool2d(3, 2, 1).eval()
    x = torch.randn(1, 3, 9, 9)
    x[0, 0, 4, 4] = float("nan")
    x[0, 1] = -float("inf")
    fn, inputs, _ = compile_model(model, x)
    got, want = fn(*inputs)[0], model(x).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want))


def test_residual_consumer_is_fused():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(8, 8, 3, 1, 1, groups=8)

        def forward(self, x):
            return torch.relu(self.dw(x) + x)

    text = check(M(), (1, 8, 13, 21))
    assert "consumer(s) fused" in text


class SiluResidual(nn.Module):
    """Depthwise + BN + SiLU, then the block's input added: the plane's epilogue reads a second tensor."""

    def __init__(self, c, k):
        super().__init__()
        self.dw, self.bn = nn.Conv2d(c, c, k, 1, k // 2, groups=c), random_batchnorm(c)

    def forward(self, x):
        return nn.functional.silu(self.bn(self.dw(x))) + x


def _dw_act(c, k, s, act):
    return nn.Sequential(nn.Conv2d(c, c, k, s, k // 2, groups=c), random_batchnorm(c), act)


@pytest.mark.skipif(not host_has("avx2", "fma"), reason="runs x86-64-v3 code (AVX2, FMA)")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model,shape,plane", [
    (_dw_act(6, 3, 1, nn.SiLU()), (1, 6, 14, 14), True),       # one vector and a masked one per row
    (_dw_act(5, 5, 2, nn.SiLU()), (2, 5, 29, 57), True),       # stride 2, batch 2, a partial column block
    (_dw_act(4, 3, 1, nn.SiLU()), (1, 4, 9, 40), True),        # full blocks in the column loop
    (_dw_act(3, 7, 1, nn.SiLU()), (1, 3, 13, 11), True),       # 7x7: the kernel-row loop
    (_dw_act(4, 3, 1, nn.GELU()), (1, 4, 10, 19), True),       # erf
    (SiluResidual(4, 3), (1, 4, 12, 21), True),                # a residual read in the plane's loop
    (_dw_act(4, 3, 1, nn.Hardswish()), (1, 4, 12, 21), False),  # a division, no transcendental: in the block
    (_dw_act(4, 3, 1, nn.ReLU6()), (1, 4, 12, 21), False),
], ids=["silu-14", "silu-5x5s2-batch2", "silu-40", "silu-7x7", "gelu", "silu-residual", "hardswish", "relu6"])
def test_plane_epilogue_on_the_avx2_row(model, shape, plane, threads, monkeypatch):
    """x86-64-v3's row applies a transcendental epilogue to each channel's stored plane, one vector
    at a time (`window_kernel.plane_epilogue_pays`): torch's numbers on one and two threads; a
    hardswish or ReLU6 stays in the register block."""
    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner
    from etc.targets.cpu.passes.window_kernels import WindowKernels

    planes = []
    rewrite = WindowKernels.rewrite
    monkeypatch.setattr(WindowKernels, "rewrite", lambda self, win, text, plane=False: (
        planes.append(plane), rewrite(self, win, text, plane))[1])
    torch.manual_seed(0)
    model = model.eval()
    x = torch.randn(*shape)
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner(target="x86-64-v3",
                                                                                    num_threads=threads))
    assert not edge.delegation_reports[-1].portable
    assert planes == [plane], planes
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for seed in range(2):
        torch.manual_seed(seed)
        x = torch.randn(*shape) * 3
        with torch.no_grad():
            want = model(x).numpy()
        (got,) = method.execute([x.numpy()])
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-6)


def test_plane_epilogue_only_on_the_avx2_row():
    """Measured on an AVX2 core only (window_kernel.plane_epilogue_pays); 32-register rows keep it in the block."""
    from etc.targets.cpu.isa import ISA_TABLE

    assert ISA_TABLE["avx2"].window_plane_epilogue
    assert not any(row.window_plane_epilogue for name, row in ISA_TABLE.items() if name != "avx2")


def test_not_taken_is_visible():
    """A channels-multiplier convolution is not a depthwise_conv_2d_nchw_chw; an NHWC pooling
    built by hand is reported with its reason."""
    text = """
    func.func @f(%x: tensor<1x6x6x4xf32>) -> tensor<1x3x3x4xf32> {
      %k = tensor.empty() : tensor<2x2xf32>
      %e = tensor.empty() : tensor<1x3x3x4xf32>
      %r = linalg.pooling_nhwc_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
          ins(%x, %k : tensor<1x6x6x4xf32>, tensor<2x2xf32>) outs(%e : tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32>
      return %r : tensor<1x3x3x4xf32>
    }"""
    out = run_window_pass(text)
    assert 'etc.cpu.path = "loops: pooling_nhwc_max: NHWC window ops are not handled"' in out


def test_real_ir_form():
    """What torch-mlir produces for a MobileNetV2 block: padded input, bias broadcast as the init,
    ReLU6 as two generics: all of it becomes one kernel."""
    model = nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1, groups=8), random_batchnorm(8), nn.ReLU6())
    text, _ = linalg_of(model, torch.randn(1, 8, 14, 14))
    assert "linalg.depthwise_conv_2d_nchw_chw" in text
    out = run_window_pass(text)
    assert "= linalg.depthwise_conv_2d_nchw_chw" not in out
    assert "= linalg.generic" not in out and "= linalg.broadcast" not in out  # (decisions name them)
    assert out.count("path = \"fused\"") == 3  # the padding and both ReLU6 generics
    assert "= tensor.pad" not in out  # the kernel reads the unpadded input
    assert "2 consumer(s) fused" in out


@pytest.mark.parametrize("model,shape", [
    (nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1, groups=8), nn.BatchNorm2d(8), nn.ReLU6()), (1, 8, 21, 37)),
    (nn.Conv2d(4, 4, 5, 1, 2, dilation=1, groups=4, bias=False), (2, 4, 16, 40)),
    (nn.MaxPool2d(3, 2, 1), (1, 4, 19, 41)),
    (nn.AvgPool2d(3, 1, 1), (1, 4, 19, 41)),
])
def test_kernel_row_loop(model, shape):
    """unroll-taps=0: every interior block loops over the kernel rows (the path 7x7 takes)."""
    check(model, shape, options="{unroll-taps=0 rows=3}")


@pytest.mark.parametrize("model,shape", [
    (nn.MaxPool2d(3, 2, 1, ceil_mode=True), (1, 4, 14, 14)),
    (nn.AvgPool2d(3, 2, 1, count_include_pad=False), (1, 4, 14, 15)),  # divisor per position: not fused
    (nn.AvgPool2d(3, 2, 1, ceil_mode=True), (1, 4, 14, 14)),
    (nn.MaxPool2d((2, 3), (1, 2), (1, 1), dilation=(2, 1)), (1, 3, 12, 17)),
    (nn.Conv2d(6, 6, (3, 1), (2, 1), (1, 0), groups=6), (1, 6, 12, 17)),
    (nn.Conv2d(6, 6, 3, 3, 1, groups=6), (1, 6, 20, 25)),  # column stride 3
])
def test_pool_and_depthwise_variants(model, shape):
    check(model, shape)
