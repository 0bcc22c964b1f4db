"""Correctness of targets/cpu/kernels_strategy.py (the `apply_codegen_strategy` hook) through the
standalone path in targets/cpu/gemm.py: linalg text -> strategy -> bufferize -> LLVM -> llvmlite JIT.

Odd sizes (not multiples of the 8 x 32 register tile or the cache blocks), strided and padded
convolutions, depthwise convolutions and poolings in both layouts, against numpy/torch; and checks
that a matmul becomes a vector FMA microkernel. Correctness only, never timing."""

from __future__ import annotations

import numpy as np
import pytest

from etc.targets.cpu import gemm
from etc.targets.cpu import kernels_strategy as ks
from etc.targets.cpu.codegen import CpuTarget, host_target

torch = pytest.importorskip("torch")

HOST = host_target()
pytestmark = pytest.mark.skipif(ks.config_for(HOST) is None, reason="host has no SIMD the strategy targets")

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


def close(actual, expected, tol=2e-5):
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(actual - expected).max()) / scale
    assert err < tol, f"relative error {err}"


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 33, 100), (100, 7, 33), (33, 100, 7), (1, 100, 33),
                                   (100, 33, 1), (70, 300, 260)])
def test_matmul_odd_sizes(m, n, k):
    kern = gemm.compile_linalg_text(gemm.matmul_ir(m, n, k))
    a, b = rand(m, k), rand(k, n)
    close(kern(a, b), a @ b)


@pytest.mark.parametrize("m,n,k", [(7, 33, 100), (100, 300, 33)])
def test_matmul_bias_relu_fused(m, n, k):
    kern = gemm.compile_linalg_text(gemm.matmul_ir(m, n, k, bias=True, relu=True))
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    close(kern(a, b, bias), np.maximum(a @ b + bias, 0))
    # The consumer went into the matmul's loop nest and was vectorized: no linalg op is left.
    assert "linalg." not in kern.mlir.split("func.func", 1)[1]


def test_batch_matmul():
    kern = gemm.compile_linalg_text(gemm.matmul_ir(7, 33, 20, batch=3))
    a, b = rand(3, 7, 20), rand(3, 20, 33)
    close(kern(a, b), a @ b)


def _torch_conv(x, w, stride, pad, layout, depthwise):
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    if layout == "nhwc":
        tx = tx.permute(0, 3, 1, 2)
        tw = tw.permute(2, 0, 1).unsqueeze(1) if depthwise else tw.permute(3, 2, 0, 1)
    elif depthwise:
        tw = tw.unsqueeze(1)
    y = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad, groups=tx.shape[1] if depthwise else 1)
    if layout == "nhwc":
        y = y.permute(0, 2, 3, 1)
    return y.contiguous().numpy()


CONVS = [  # n, c, h, w, f, k, stride, pad, layout
    (1, 8, 9, 9, 16, 3, 2, 1, "nchw"),
    (1, 3, 7, 7, 5, 1, 1, 0, "nchw"),
    (1, 16, 8, 8, 33, 1, 2, 0, "nchw"),
    (2, 4, 7, 7, 6, 3, 1, 1, "nchw"),  # batch 2: left to the default strategy
    (1, 7, 11, 11, 33, 3, 1, 1, "nhwc"),
    (1, 8, 9, 9, 16, 3, 2, 1, "nhwc"),
    (1, 5, 10, 9, 7, 1, 2, 0, "nhwc"),
]


@pytest.mark.parametrize("n,c,h,w,f,k,stride,pad,layout", CONVS)
def test_conv2d(n, c, h, w, f, k, stride, pad, layout):
    kern = gemm.compile_linalg_text(gemm.conv_ir(n, c, h, w, f, k, k, stride=stride, pad=pad, layout=layout))
    x = rand(n, c, h, w) if layout == "nchw" else rand(n, h, w, c)
    wt = rand(f, c, k, k) if layout == "nchw" else rand(k, k, c, f)
    close(kern(x, wt), _torch_conv(x, wt, stride, pad, layout, False))


@pytest.mark.parametrize("c,h,w,k,stride,pad,layout", [(7, 10, 10, 3, 1, 1, "nchw"), (33, 9, 12, 3, 2, 1, "nchw"),
                                                       (7, 10, 10, 3, 2, 1, "nhwc"), (40, 9, 9, 3, 1, 1, "nhwc"),
                                                       (16, 8, 8, 5, 1, 2, "nchw")])
def test_depthwise(c, h, w, k, stride, pad, layout):
    kern = gemm.compile_linalg_text(gemm.conv_ir(1, c, h, w, c, k, k, stride=stride, pad=pad, layout=layout,
                                                 depthwise=True))
    x = rand(1, c, h, w) if layout == "nchw" else rand(1, h, w, c)
    wt = rand(c, k, k) if layout == "nchw" else rand(k, k, c)
    close(kern(x, wt), _torch_conv(x, wt, stride, pad, layout, True))
    assert "vector.fma" in kern.mlir or "math.fma" in kern.mlir and "vector<" in kern.mlir


@pytest.mark.parametrize("kind", ["max", "sum"])
@pytest.mark.parametrize("layout,stride", [("nchw", 1), ("nchw", 2), ("nhwc", 1), ("nhwc", 2)])
def test_pooling(kind, layout, stride):
    kern = gemm.compile_linalg_text(gemm.pool_ir(1, 5, 9, 11, 3, stride=stride, kind=kind, layout=layout))
    x = rand(1, 5, 9, 11)
    tx = torch.from_numpy(x)
    ref = torch.nn.functional.max_pool2d(tx, 3, stride) if kind == "max" else \
        torch.nn.functional.avg_pool2d(tx, 3, stride) * 9
    ref = ref.numpy()
    if layout == "nhwc":
        x, ref = x.transpose(0, 2, 3, 1).copy(), ref.transpose(0, 2, 3, 1)
    close(kern(x), ref)
    # vectorized, except NCHW with a column stride (left to the default: see _window_pays)
    assert ("vector<" in kern.mlir) == (layout == "nhwc" or stride == 1)


def test_matmul_becomes_vector_fma_microkernel():
    kern = gemm.compile_linalg_text(gemm.matmul_ir(64, 64, 64))
    cfg = ks.config_for(HOST)
    # After the strategy: an mr x nr accumulator carried by the k loop, updated by nr-wide FMAs.
    assert f"vector<{cfg.mr}x{cfg.nr}xf32>" in kern.mlir
    assert f"vector.fma" in kern.mlir
    assert "vector.contract" not in kern.mlir
    if cfg.lanes == 16:
        assert "vfmadd231ps\t%zmm" in kern.asm or "vfmadd231ps\t(" in kern.asm or "vfmadd" in kern.asm
        assert "zmm" in kern.asm


def test_configs_per_target():
    assert ks.config_for(CpuTarget("x86_64-unknown-linux-gnu", "znver4", "+avx512f,+avx2,+fma")).lanes == 16
    assert ks.config_for(CpuTarget("x86_64-unknown-linux-gnu", "haswell", "+avx2,+fma")).lanes == 8
    assert ks.config_for(CpuTarget("aarch64-linux-gnu", "generic", "+neon")).lanes == 4
    assert ks.config_for(CpuTarget("thumbv7em-none-eabihf", "cortex-m7", "")) is None


def test_aarch64_lowers_to_llvm_dialect():
    """The strategy's IR for NEON goes through the same vector lowering (object not run)."""
    from torch_mlir import ir

    target = CpuTarget("aarch64-linux-gnu", "generic", "+neon")
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(gemm.matmul_ir(9, 20, 13, bias=True, relu=True))
        assert ks.apply_kernel_strategy(module, target) >= 1
        assert "vector<8x8xf32>" in str(module)
        gemm._run(module, gemm.BUFFERIZE, "bufferization")
        ks.remove_self_copies(module)
        gemm._run(module, gemm.TO_LLVM, "lowering")


def test_hook_falls_back_to_default_without_vector_lowering(monkeypatch):
    from torch_mlir import ir

    monkeypatch.setattr(ks, "lowers_vectors", lambda: False)
    monkeypatch.setenv("ETC_CPU_GEMM_STRATEGY", "kernels")
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(gemm.matmul_ir(16, 16, 16))
        ks.apply_codegen_strategy(module, HOST)
        assert "vector." not in str(module)
    monkeypatch.setattr(ks, "lowers_vectors", lambda: True)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(gemm.matmul_ir(16, 16, 16))
        ks.apply_codegen_strategy(module, HOST)
        assert "vector.fma" in str(module)


def test_dynamic_shapes_are_left_alone():
    from torch_mlir import ir

    text = """
    func.func @mm(%a: tensor<?x8xf32>, %b: tensor<8x16xf32>, %c: tensor<?x16xf32>) -> tensor<?x16xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<?x8xf32>, tensor<8x16xf32>) outs(%c : tensor<?x16xf32>) -> tensor<?x16xf32>
      return %r : tensor<?x16xf32>
    }"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert ks.apply_kernel_strategy(module, HOST) == 0
        assert "linalg.matmul" in str(module)


@pytest.mark.parametrize("gemm_strategy", ["strategy", "kernels"])
def test_hook_handles_windows_and_contractions(gemm_strategy, monkeypatch):
    """The hook on a module with a depthwise conv, a pooling and a matmul-like conv: nothing named
    is left for the loop lowering, and the code computes the same as torch."""
    monkeypatch.setattr(ks, "lowers_vectors", lambda: True)
    monkeypatch.setenv("ETC_CPU_GEMM_STRATEGY", gemm_strategy)
    text = """
    func.func @net(%x: tensor<1x16x10x10xf32>, %dw: tensor<16x3x3xf32>, %w: tensor<32x16x1x1xf32>) -> tensor<1x32x4x4xf32> {
      %z = arith.constant 0.0 : f32
      %ninf = arith.constant 0xFF800000 : f32
      %e = tensor.empty() : tensor<1x16x8x8xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
      %d = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%x, %dw : tensor<1x16x10x10xf32>, tensor<16x3x3xf32>) outs(%f : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
      %e2 = tensor.empty() : tensor<1x32x8x8xf32>
      %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
      %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%d, %w : tensor<1x16x8x8xf32>, tensor<32x16x1x1xf32>) outs(%f2 : tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
      %e3 = tensor.empty() : tensor<1x32x4x4xf32>
      %f3 = linalg.fill ins(%ninf : f32) outs(%e3 : tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32>
      %win = tensor.empty() : tensor<2x2xf32>
      %p = linalg.pooling_nchw_max {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
           ins(%c, %win : tensor<1x32x8x8xf32>, tensor<2x2xf32>) outs(%f3 : tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32>
      return %p : tensor<1x32x4x4xf32>
    }"""
    from torch_mlir import ir

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        ks.apply_codegen_strategy(module, HOST)
        after = str(module)
    for name in ("depthwise_conv", "pooling", "conv_2d", "linalg.matmul"):
        assert name not in after
    kern = gemm.compile_linalg_text(text, strategy="hook")
    x, dw, w = rand(1, 16, 10, 10), rand(16, 3, 3), rand(32, 16, 1, 1)
    tx = torch.from_numpy(x)
    ref = torch.nn.functional.conv2d(tx, torch.from_numpy(dw).unsqueeze(1), groups=16)
    ref = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(ref, torch.from_numpy(w)), 2, 2)
    close(kern(x, dw, w), ref.numpy())


def test_failed_phase_restores_the_module(monkeypatch):
    """A strategy failure costs speed, not the compile: the module is put back for the default."""
    def boom(module, script):
        raise RuntimeError("injected")

    monkeypatch.setattr(ks, "run_transform", boom)
    with pytest.warns(RuntimeWarning, match="injected"):
        kern = gemm.compile_linalg_text(gemm.conv_ir(1, 7, 10, 10, 7, 3, 3, stride=2, pad=1, depthwise=True))
    x, wt = rand(1, 7, 10, 10), rand(7, 3, 3)
    close(kern(x, wt), _torch_conv(x, wt, 2, 1, "nchw", True))
    assert "vector." not in kern.mlir


def test_restore_keeps_the_function_op(monkeypatch):
    """codegen holds a handle to the func across the hook: a failed phase must not replace it."""
    from torch_mlir import ir

    monkeypatch.setattr(ks, "run_transform", lambda module, script: (_ for _ in ()).throw(RuntimeError("x")))
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(gemm.conv_ir(1, 7, 10, 10, 7, 3, 3, stride=1, pad=1, depthwise=True))
        fn = module.body.operations[0]
        before = str(module)
        with pytest.warns(RuntimeWarning):
            assert ks.apply_kernel_strategy(module, HOST) == 0
        assert str(module) == before
        assert fn.operation.verify() and len(list(module.body.operations)) == 1


@pytest.mark.parametrize("gemm_strategy", ["strategy", "kernels"])
def test_hook_nhwc_conv(gemm_strategy, monkeypatch):
    monkeypatch.setattr(ks, "lowers_vectors", lambda: True)
    monkeypatch.setenv("ETC_CPU_GEMM_STRATEGY", gemm_strategy)
    text = gemm.conv_ir(1, 32, 16, 16, 64, 3, 3, stride=1, pad=1, layout="nhwc")
    kern = gemm.compile_linalg_text(text, strategy="hook")
    assert "vector.fma" in kern.mlir and "conv_2d" not in kern.mlir
    x, wt = rand(1, 16, 16, 32), rand(3, 3, 32, 64)
    close(kern(x, wt), _torch_conv(x, wt, 1, 1, "nhwc", False))
