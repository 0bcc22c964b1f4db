"""The cpu target's GEMM kernels (etc-cpu-gemm-kernels, targets/cpu/kernels/gemm_*.py) and window kernels
through the whole cpu pipeline: correctness only.

Each case is linalg-on-tensors text as torch-mlir produces it, compiled through the cpu
pipeline (`pipeline.compile_linalg_text`: passes -> LLVM -> object -> runtime): results are checked
against numpy/torch. Odd sizes (1, 7, 33, 100) exercise the peeled partial row block,
zero-padded column panels and K blocks that do not divide K. Timing lives in
bench/gemm.py, never here.
"""

import dataclasses
import math
import re
from functools import partial

import numpy as np
import pytest
import torch

from etc.targets.cpu.isa import PRESETS, CpuTarget, isa_for, resolve_target
from etc.targets.cpu.kernels import gemm_match as strategy
from etc.targets.cpu.pipeline import compile_linalg_text, label_arguments, run_cpu_pipeline

HOST = resolve_target(None)
ISA = isa_for(HOST)
CFG = strategy.KernelConfig(ISA.lanes, ISA.gemm_mr, ISA.gemm_nr, ISA.gemm_kc) if ISA.vectorizes else None
needs_simd = pytest.mark.skipif(CFG is None, reason="host has no SIMD FMA configuration")
# The host's lanes and panel width, for sizes stated in vectors and panels (AVX-512: 16 and 64;
# AVX2: 8 and 16); the placeholders only name the cases `needs_simd` skips.
LANES, NR = (CFG.vector_width, CFG.nr) if CFG else (16, 64)


def compile_standalone(text, *, min_flops=None, target=None):
    """A callable returning the list of outputs (and `.decisions`)."""
    fn = compile_linalg_text(text, target=target, gemm_min_flops=min_flops)

    def call(*inputs):
        out = fn(*inputs)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    call.decisions = fn.decisions
    return call


def lowered(text, target=HOST, min_flops=None) -> str:
    """The LLVM-dialect module the cpu pipeline makes of `text` (every argument an input)."""
    from torch_mlir import ir

    from etc.targets.cpu.lowering.context import shared_context

    with shared_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        fn = [op for op in module.body.operations if op.operation.name == "func.func"][0]
        n = len(fn.regions[0].blocks[0].arguments)
        label_arguments(fn, [("input", str(i)) for i in range(n)])
        run_cpu_pipeline(module, target, start="linalg", verify=True, gemm_min_flops=min_flops)
        return str(module)


def rel_error(actual, expected) -> float:
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max()))
    return float(np.abs(np.asarray(actual, dtype=np.float64) - expected).max() / scale)


def t(shape) -> str:
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


def matmul_text(m, k, n) -> str:
    return f"""
func.func @mm(%a: {t([m, k])}, %b: {t([k, n])}) -> {t([m, n])} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {t([m, n])}
  %c = linalg.fill ins(%z : f32) outs(%e : {t([m, n])}) -> {t([m, n])}
  %r = linalg.matmul ins(%a, %b : {t([m, k])}, {t([k, n])}) outs(%c : {t([m, n])}) -> {t([m, n])}
  return %r : {t([m, n])}
}}"""


def batch_matmul_text(bt, m, k, n) -> str:
    return f"""
func.func @bmm(%a: {t([bt, m, k])}, %b: {t([bt, k, n])}) -> {t([bt, m, n])} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {t([bt, m, n])}
  %c = linalg.fill ins(%z : f32) outs(%e : {t([bt, m, n])}) -> {t([bt, m, n])}
  %r = linalg.batch_matmul ins(%a, %b : {t([bt, m, k])}, {t([bt, k, n])}) outs(%c : {t([bt, m, n])}) -> {t([bt, m, n])}
  return %r : {t([bt, m, n])}
}}"""


def linear_relu_text(m, k, n, epilogue: bool = True) -> str:
    """torch.nn.Linear + relu as torch-mlir lowers it: a transpose of the weight, matmul, bias+relu
    generic; `epilogue=False`: x @ W^T alone (no bias argument)."""
    bias = f", %bias: {t([n])}" if epilogue else ""
    head = f"""
#bias = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @linear(%x: {t([m, k])}, %w: {t([n, k])}{bias}) -> {t([m, n])} {{
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : {t([k, n])}
  %wt = linalg.transpose ins(%w : {t([n, k])}) outs(%e0 : {t([k, n])}) permutation = [1, 0]
  %e = tensor.empty() : {t([m, n])}
  %c = linalg.fill ins(%z : f32) outs(%e : {t([m, n])}) -> {t([m, n])}
  %mm = linalg.matmul ins(%x, %wt : {t([m, k])}, {t([k, n])}) outs(%c : {t([m, n])}) -> {t([m, n])}
"""
    if not epilogue:
        return head + f"  return %mm : {t([m, n])}\n}}"
    return head + f"""  %r = linalg.generic {{indexing_maps = [#bias, #id, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%bias, %mm : {t([n])}, {t([m, n])}) outs(%e : {t([m, n])}) {{
  ^bb0(%bi: f32, %v: f32, %o: f32):
    %s = arith.addf %bi, %v : f32
    %p = arith.cmpf ugt, %s, %z : f32
    %y = arith.select %p, %s, %z : f32
    linalg.yield %y : f32
  }} -> {t([m, n])}
  return %r : {t([m, n])}
}}"""


def _pad_text(name, src, shape, p) -> tuple[str, list]:
    if p == 0:
        return "", shape
    n, c, h, w = shape
    out = [n, c, h + 2 * p, w + 2 * p]
    return (f"""  {name} = tensor.pad {src} low[0, 0, {p}, {p}] high[0, 0, {p}, {p}] {{
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %z : f32
  }} : {t(shape)} to {t(out)}
"""), out


def conv_text(n, c, h, w, f, k, stride, pad, dilation=1) -> tuple[str, tuple]:
    padded, pshape = _pad_text("%xp", "%x", [n, c, h, w], pad)
    src = "%xp" if pad else "%x"
    oh = (pshape[2] - dilation * (k - 1) - 1) // stride + 1
    ow = (pshape[3] - dilation * (k - 1) - 1) // stride + 1
    out = [n, f, oh, ow]
    return f"""
func.func @conv(%x: {t([n, c, h, w])}, %w: {t([f, c, k, k])}, %b: {t([f])}) -> {t(out)} {{
  %z = arith.constant 0.0 : f32
{padded}  %e = tensor.empty() : {t(out)}
  %bb = linalg.broadcast ins(%b : {t([f])}) outs(%e : {t(out)}) dimensions = [0, 2, 3]
  %r = linalg.conv_2d_nchw_fchw {{dilations = dense<{dilation}> : vector<2xi64>, strides = dense<{stride}> : vector<2xi64>}}
      ins({src}, %w : {t(pshape)}, {t([f, c, k, k])}) outs(%bb : {t(out)}) -> {t(out)}
  return %r : {t(out)}
}}""", tuple(out)


def depthwise_text(n, c, h, w, k, stride, pad) -> tuple[str, tuple]:
    padded, pshape = _pad_text("%xp", "%x", [n, c, h, w], pad)
    src = "%xp" if pad else "%x"
    oh, ow = (pshape[2] - k) // stride + 1, (pshape[3] - k) // stride + 1
    out = [n, c, oh, ow]
    return f"""
func.func @dw(%x: {t([n, c, h, w])}, %w: {t([c, k, k])}, %b: {t([c])}) -> {t(out)} {{
  %z = arith.constant 0.0 : f32
{padded}  %e = tensor.empty() : {t(out)}
  %bb = linalg.broadcast ins(%b : {t([c])}) outs(%e : {t(out)}) dimensions = [0, 2, 3]
  %r = linalg.depthwise_conv_2d_nchw_chw {{dilations = dense<1> : vector<2xi64>, strides = dense<{stride}> : vector<2xi64>}}
      ins({src}, %w : {t(pshape)}, {t([c, k, k])}) outs(%bb : {t(out)}) -> {t(out)}
  return %r : {t(out)}
}}""", tuple(out)


def maxpool_text(n, c, h, w, k, stride) -> tuple[str, tuple]:
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    out = [n, c, oh, ow]
    return f"""
func.func @pool(%x: {t([n, c, h, w])}) -> {t(out)} {{
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : {t(out)}
  %init = linalg.fill ins(%ninf : f32) outs(%e : {t(out)}) -> {t(out)}
  %win = tensor.empty() : {t([k, k])}
  %r = linalg.pooling_nchw_max {{dilations = dense<1> : vector<2xi64>, strides = dense<{stride}> : vector<2xi64>}}
      ins(%x, %win : {t([n, c, h, w])}, {t([k, k])}) outs(%init : {t(out)}) -> {t(out)}
  return %r : {t(out)}
}}""", tuple(out)


rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


ODD = [1, 7, 33, 100]


@needs_simd
@pytest.mark.parametrize("m,k,n", [(1, 7, 33), (7, 33, 100), (33, 100, 1), (100, 1, 7), (100, 33, 7), (7, 100, 100),
                                   (33, 33, 33), (100, 100, 100), (64, 256, 128), (13, 300, 70),
                                   (5, 2 * CFG.kc + 7 if CFG else 7, 70), (7, 3 * CFG.kc if CFG else 7, 20)])
def test_matmul_odd_sizes(m, k, n):
    """Odd sizes: partial row blocks and column panels; the last two K longer than 1.5 kc, in
    blocks (one that does not divide K, one that does)."""
    fn = compile_standalone(matmul_text(m, k, n), min_flops=0)
    a, b = rand(m, k), rand(k, n)
    (out,) = fn(a, b)
    assert rel_error(out, a.astype(np.float64) @ b) < 1e-5





@needs_simd
@pytest.mark.parametrize("n", [5, 12, 17, CFG.vector_width + CFG.vector_width // 2 if CFG else 24, CFG.nr // 2 - 1 if CFG else 31,
                               CFG.vector_width // 2 if CFG else 8, CFG.vector_width if CFG else 16])
def test_narrow_columns_take_the_kernel_unless_one_or_half_a_vector(n):
    """Many rows, fewer columns than half a panel: the GEMM kernel (B in one padded panel), except
    for half or one vector of columns, which the loop nest vectorizes whole (the small path);
    the loops ran 3-10x slower at every other width (gemm_match.skip_reason). Same result.
    Where one vector is half a panel (AVX2: 8 lanes, nr = 16) it is not narrow: the kernel."""
    m, k = 512, 256
    fn = compile_standalone(matmul_text(m, k, n))
    a, b = rand(m, k), rand(k, n)
    (out,) = fn(a, b)
    assert rel_error(out, a.astype(np.float64) @ b) < 1e-5
    (path,) = [d.path for d in fn.decisions if d.kind == "contraction"]
    narrow = n < CFG.nr // 2
    assert path == ("small" if narrow and n in (CFG.vector_width // 2, CFG.vector_width) else "gemm"), fn.decisions


def test_in_place_k_block_rule():
    """The K block of a B read in place, as x86's kc = 2048 and kc-strided = 128: whole K unless the
    panel rows alias (4 KiB multiples: at most 1 MiB of L2 as gcd(stride, 4 KiB) per row) or span
    more than 6 MiB of B; then the longest block that does not (a divisor of K when one is near)."""
    cfg = strategy.KernelConfig(16, 6, 64, 2048, kc_strided=128)
    block = strategy.in_place_k_block
    assert block(1024, None, cfg) == 1024  # a contiguous panel: k_block at kc
    assert block(4096, None, cfg) == strategy.k_block(4096, 2048)
    for k, n in [(512, 512), (768, 768), (1000, 1000), (1024, 768), (256, 2048), (2048, 640), (2048, 500)]:
        assert block(k, 4 * n, cfg) == k, (k, n)  # no aliasing: whole K
    assert block(1024, 4 * 1024, cfg) == 256  # 4 KiB rows: 256 x 4 KiB = 1 MiB
    assert block(1024, 4 * 2048, cfg) == 256  # 8 KiB rows count as 4 KiB
    assert block(1024, 4 * 512, cfg) == 512  # 2 KiB rows
    assert block(1536, 4 * 1536, cfg) == 512
    assert block(384, 4 * 1024, cfg) == 192  # 384 rows would crowd 1.5 MiB: a divisor below 256
    assert block(1031, 4 * 1024, cfg) == 256  # no divisor near: a partial last block
    assert block(2048, 4 * 1000, cfg) == 1024  # not aliasing, 8 MB of B: the reach cut
    assert block(1600, 4 * 2000, cfg) == 400
    assert block(1024, 4 * 65536, cfg) == strategy.k_block(1024, 128)  # never below kc-strided's block
    assert block(1024, 4 * 1024, strategy.KernelConfig(16, 6, 64, 2048)) == 1024  # no kc-strided: kc


@needs_simd
@pytest.mark.parametrize("m,k,n", [(7, 1031, 1024), (7, 1000, 1024), (13, 1031, 1000), (6, 1600, 2000),
                                   (9, 384, 2048)])
def test_matmul_in_place_b_k_blocks(m, k, n):
    """B read in place with rows that alias in the cache (N = 1024, 2048: blocks shorter than K, one
    not dividing K), rows that do not (whole K in registers), and rows spanning many pages (K
    blocks again): the same result."""
    fn = compile_standalone(matmul_text(m, k, n), min_flops=0)
    a, b = rand(m, k), rand(k, n)
    (out,) = fn(a, b)
    assert rel_error(out, a.astype(np.float64) @ b) < 1e-5


@needs_simd
@pytest.mark.parametrize("batch,m,k,n", [(3, 7, 33, 100), (2, 7, 520, 1024)])  # the second: B's rows alias
def test_batch_matmul(batch, m, k, n):
    fn = compile_standalone(batch_matmul_text(batch, m, k, n), min_flops=0)
    a, b = rand(batch, m, k), rand(batch, k, n)
    (out,) = fn(a, b)
    assert rel_error(out, np.matmul(a.astype(np.float64), b)) < 1e-5


@needs_simd
@pytest.mark.parametrize("m,k,n", [(1, 33, 100), (7, 100, 33), (100, 64, 70)])
def test_linear_relu_transposed_weight(m, k, n):
    fn = compile_standalone(linear_relu_text(m, k, n), min_flops=0)
    x, w, b = rand(m, k), rand(n, k), rand(n)
    (out,) = fn(x, w, b)
    expected = torch.relu(torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)))
    assert rel_error(out, expected.numpy()) < 1e-5


def matmul_bias_relu_text(m, k, n) -> str:
    """B read in place (an activation), the bias and ReLU its epilogue."""
    return f"""
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @mm(%a: {t([m, k])}, %b: {t([k, n])}, %bias: {t([n])}) -> {t([m, n])} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {t([m, n])}
  %c = linalg.fill ins(%z : f32) outs(%e : {t([m, n])}) -> {t([m, n])}
  %r = linalg.matmul ins(%a, %b : {t([m, k])}, {t([k, n])}) outs(%c : {t([m, n])}) -> {t([m, n])}
  %o = linalg.generic {{indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%r, %bias : {t([m, n])}, {t([n])}) outs(%e : {t([m, n])}) {{
  ^bb0(%x: f32, %y: f32, %out: f32):
    %s = arith.addf %x, %y : f32
    %p = arith.maximumf %s, %z : f32
    linalg.yield %p : f32
  }} -> {t([m, n])}
  return %o : {t([m, n])}
}}"""


@needs_simd
@pytest.mark.parametrize("m,k,n", [
    (13, 300, 70),   # K in blocks, a partial column panel of 6 under them
    (7, 400, 130),   # two full panels and a partial one of 2
    (13, 300, 1),    # a single column: only the partial panel
    (6, 100, 70),    # K in registers, partial panel
    (64, 256, 128),  # whole panels only
    (13, 64, 120),   # partial panels too wide for one register and not a power of two: split
    (7, 300, 88),    # into 16-lane pieces (56, 24, 48, 40 wide; K in blocks; a partial row block)
    (6, 100, 112),
    (1, 50, 104),
])
def test_matmul_epilogue_with_partial_column_panels(m, k, n):
    """B read in place is never padded: the last column panel is peeled, its width static in
    the K-block loops, the init and the epilogue."""
    fn = compile_standalone(matmul_bias_relu_text(m, k, n), min_flops=0)
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    (out,) = fn(a, b, bias)
    assert rel_error(out, np.maximum(a.astype(np.float64) @ b + bias, 0)) < 1e-5


def matmul_into_c_text(m, k, n) -> str:
    """C += A x B with C an argument: the accumulator starts at C itself (a "copy" init)."""
    return f"""
func.func @mm(%a: {t([m, k])}, %b: {t([k, n])}, %c: {t([m, n])}) -> {t([m, n])} {{
  %r = linalg.matmul ins(%a, %b : {t([m, k])}, {t([k, n])}) outs(%c : {t([m, n])}) -> {t([m, n])}
  return %r : {t([m, n])}
}}"""


@needs_simd
@pytest.mark.parametrize("kind,m,k,n", [
    ("plain", 16, 64, 66),         # 2 leftover columns, rows in blocks of 8
    ("plain", 13, 64, 68),         # 4 columns, 13 rows: one row at a time
    ("plain", 7, 32, 65),          # 1 column
    ("plain", 8, 48, 3 * NR + LANES // 2),  # half a vector of columns after three panels (AVX-512: 200)
    ("plain", 7, 3 * (CFG.kc if CFG else 16), 68),  # K in blocks, no epilogue: the blocks' result copied in
    ("bias_relu", 13, 64, 68),     # the epilogue (bias per column, ReLU) on the leftover tile as well
    ("bias_relu", 12, 48, NR + LANES // 2),  # half a vector after one panel (AVX-512: 72)
    ("into_c", 12, 64, 68),        # the accumulator starts at C's leftover columns
    ("batched", 3, 48, NR + 3 * LANES // 8),  # a batch of 3: A and B batched (AVX-512: 70, 6 columns)
])
def test_leftover_columns_as_dot_products(kind, m, k, n):
    """The last N % lanes <= lanes / 2 columns (16 and 8 on AVX-512) of a B read in place, after
    at least one full panel, are dot products along K (`gemm_match.leftover_columns`), a recorded
    part of the GEMM decision."""
    a, b = rand(m, k), rand(k, n)
    if kind == "batched":
        a, b = rand(3, m, k), rand(3, k, n)
        fn = compile_standalone(batch_matmul_text(3, m, k, n), min_flops=0)
        (out,) = fn(a, b)
        expected = np.matmul(a.astype(np.float64), b)
    elif kind == "bias_relu":
        bias = rand(n)
        fn = compile_standalone(matmul_bias_relu_text(m, k, n), min_flops=0)
        (out,) = fn(a, b, bias)
        expected = np.maximum(a.astype(np.float64) @ b + bias, 0)
    elif kind == "into_c":
        c = rand(m, n)
        fn = compile_standalone(matmul_into_c_text(m, k, n), min_flops=0)
        (out,) = fn(a, b, c)
        expected = a.astype(np.float64) @ b + c
    else:
        fn = compile_standalone(matmul_text(m, k, n), min_flops=0)
        (out,) = fn(a, b)
        expected = a.astype(np.float64) @ b
    assert rel_error(out, expected) < 1e-5
    assert any(f"the last {n % CFG.vector_width} columns as dot products along K" in str(d) for d in fn.decisions), \
        fn.decisions


@needs_simd
@pytest.mark.parametrize("threads", [1, 2])
def test_leftover_columns_epilogue_reads_a_bool_mask(threads):
    """The leftover columns' epilogue reads its extras sliced to those columns, whatever their
    element type: torch.where over the product with a bool mask and a second tensor."""
    import etc
    from etc.compiler.delegation import CompileSpec
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    class Where(torch.nn.Module):
        def forward(self, a, b, m, r):
            return torch.where(m, a @ b, r * 2.0)

    torch.manual_seed(0)
    a, b, m, r = torch.randn(12, 64), torch.randn(64, 68), torch.rand(12, 68) > 0.5, torch.randn(12, 68)
    partitioner = CpuPartitioner(num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    edge = etc.to_edge(torch.export.export(Where(), (a, b, m, r))).to_backend(partitioner)
    report = edge.delegation_info()
    assert "the last 4 columns as dot products along K" in report and "epilogue -> fused" in report, report
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    (out,) = method.execute([a.numpy(), b.numpy(), m.numpy(), r.numpy()])
    assert rel_error(out, Where()(a, b, m, r).numpy()) < 1e-5


@needs_simd
def test_leftover_columns_need_whole_vectors_of_k():
    """K not whole vectors: the last columns stay a partial panel, and the decision says why."""
    lanes = CFG.vector_width  # AVX-512: K = 60, a quarter vector (4 columns) past one panel of 64
    m, k, n = 7, 4 * lanes - lanes // 4, CFG.nr + lanes // 4
    fn = compile_standalone(matmul_text(m, k, n), min_flops=0)
    a, b = rand(m, k), rand(k, n)
    (out,) = fn(a, b)
    assert rel_error(out, a.astype(np.float64) @ b) < 1e-5
    assert any(f"the last {n % lanes} columns in a partial panel (K = {k} is not whole vectors of {lanes})" in str(d)
               for d in fn.decisions), fn.decisions


@needs_simd
@pytest.mark.parametrize("n,c,h,w,f,k,stride,pad,dil", [
    (1, 7, 33, 33, 33, 3, 1, 1, 1),   # padded 3x3
    (2, 3, 17, 17, 7, 3, 2, 1, 1),    # stride 2, batch 2
    (1, 33, 7, 7, 100, 1, 1, 0, 1),   # 1x1 = matmul on the input in place
    (1, 16, 9, 9, 8, 1, 2, 0, 1),     # 1x1 stride 2 (a strided gather)
    (1, 4, 12, 12, 9, 3, 1, 2, 2),    # dilation 2
    (1, 1, 1, 1, 7, 1, 1, 0, 1),      # one input channel, one pixel
    (1, 64, 14, 14, 32, 3, 1, 1, 1),  # K = 576 in blocks over 196 pixels: a partial panel of 4
    (1, 64, 25, 5, 64, 1, 1, 0, 1),   # DS-CNN's 1x1 over 125 pixels: a 61-wide partial panel, split
    (1, 20, 12, 10, 9, 3, 1, 1, 1),   # 3x3 im2col over 120 pixels: a 56-wide one
])
def test_conv2d(n, c, h, w, f, k, stride, pad, dil):
    text, shape = conv_text(n, c, h, w, f, k, stride, pad, dil)
    fn = compile_standalone(text, min_flops=0)
    x, wt, b = rand(n, c, h, w), rand(f, c, k, k), rand(f)
    (out,) = fn(x, wt, b)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b),
                                          stride=stride, padding=pad, dilation=dil)
    assert out.shape == shape
    assert rel_error(out, expected.numpy()) < 1e-5


# The side of a square output map under one column panel, up to 6 (AVX-512: 6x6 = 36 of 64;
# AVX2: 3x3 = 9 of 16) and up to 5 (the stride-2 case).
FEW = min(6, math.isqrt(NR - 1))
FEW_S2 = min(5, math.isqrt(NR - 1))


@needs_simd
@pytest.mark.parametrize("n,c,h,w,f,k,stride,pad,path", [
    (1, 128, 3, 3, 256, 1, 1, 0, "gemm-transposed"),  # MobileNet's last 1x1: 9 pixels, 256 filters
    (1, 64, FEW, FEW, 128, 3, 1, 1, "gemm-transposed"),  # 3x3 through the transposed im2col (AVX-512: 6x6)
    (2, 16, 3, 3, 120, 1, 1, 0, "gemm-transposed"),   # batch 2, filters not a whole panel (padded, sliced back)
    (1, 48, 2 * FEW_S2 - 1, 2 * FEW_S2 - 1, 100, 1, 2, 0, "gemm-transposed"),  # 1x1 stride 2 (AVX-512: 25
                                                      # pixels; 48 channels: enough flops at 9 too)
    (1, 480, 1, 1, 120, 1, 1, 0, "gemm-transposed"),  # squeeze-excitation on the pooled channels: one
    (2, 48, 1, 1, 1152, 1, 1, 0, "gemm-transposed"),  # pixel times the packed filter (was scalar loops)
    (1, 300, 1, 1, 150, 1, 1, 0, "gemm-transposed"),  # filters in two panels and a partial one
    (1, 32, 7, 7, 40, 1, 1, 0, "gemm"),    # 49 pixels, too few filters to transpose: the input packed
    (2, 8, 6, 6, 24, 3, 1, 1, "gemm"),     # into one padded panel (1x1 input and im2col reshaped first)
])
def test_conv2d_with_few_pixels(n, c, h, w, f, k, stride, pad, path):
    """Fewer output pixels than one column panel. Many filters: C^T = im2col^T x filter^T keeps the
    vector lanes full, down to a single pixel (a squeeze-excitation's 1x1 convolutions). Few: the
    input is packed into one padded panel, not read in place."""
    text, shape = conv_text(n, c, h, w, f, k, stride, pad)
    fn = compile_standalone(text, min_flops=None if path == "gemm-transposed" else 0)
    assert [d.path for d in fn.decisions if d.kind == "convolution"] == [path]
    x, wt, b = rand(n, c, h, w), rand(f, c, k, k), rand(f)
    (out,) = fn(x, wt, b)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b),
                                          stride=stride, padding=pad)
    assert out.shape == shape
    assert rel_error(out, expected.numpy()) < 1e-5


@needs_simd
def test_chained_contractions_read_each_other_through_the_rewrite():
    """conv -> conv and matmul -> matmul with nothing between (MobileNetV2's projection feeding the
    next expansion): the second kernel must read the first one's call, not its freed op."""
    conv = f"""
func.func @chain(%x: {t([1, 16, 8, 8])}, %w1: {t([32, 16, 1, 1])}, %w2: {t([64, 32, 1, 1])}, %m: {t([64, 64])}) -> {t([64, 64])} {{
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : {t([1, 32, 8, 8])}
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : {t([1, 32, 8, 8])}) -> {t([1, 32, 8, 8])}
  %c1 = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}}
      ins(%x, %w1 : {t([1, 16, 8, 8])}, {t([32, 16, 1, 1])}) outs(%f1 : {t([1, 32, 8, 8])}) -> {t([1, 32, 8, 8])}
  %e2 = tensor.empty() : {t([1, 64, 8, 8])}
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : {t([1, 64, 8, 8])}) -> {t([1, 64, 8, 8])}
  %c2 = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}}
      ins(%c1, %w2 : {t([1, 32, 8, 8])}, {t([64, 32, 1, 1])}) outs(%f2 : {t([1, 64, 8, 8])}) -> {t([1, 64, 8, 8])}
  %flat = tensor.collapse_shape %c2 [[0, 1], [2, 3]] : {t([1, 64, 8, 8])} into {t([64, 64])}
  %e3 = tensor.empty() : {t([64, 64])}
  %f3 = linalg.fill ins(%z : f32) outs(%e3 : {t([64, 64])}) -> {t([64, 64])}
  %p1 = linalg.matmul ins(%flat, %m : {t([64, 64])}, {t([64, 64])}) outs(%f3 : {t([64, 64])}) -> {t([64, 64])}
  %p2 = linalg.matmul ins(%p1, %m : {t([64, 64])}, {t([64, 64])}) outs(%f3 : {t([64, 64])}) -> {t([64, 64])}
  return %p2 : {t([64, 64])}
}}"""
    fn = compile_standalone(conv)
    x, w1, w2, m = rand(1, 16, 8, 8), rand(32, 16, 1, 1), rand(64, 32, 1, 1), rand(64, 64)
    (out,) = fn(x, w1, w2, m)
    c = torch.nn.functional.conv2d(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w1)),
                                   torch.from_numpy(w2)).reshape(64, 64).numpy().astype(np.float64)
    assert rel_error(out, c @ m @ m) < 1e-5


def test_conv_transposes_only_without_a_full_column_panel():
    cfg = strategy.KernelConfig(16, 6, 64, 128)

    def gemm(f, pixels):
        return strategy.Gemm(None, 1, f, pixels, 9, None, False, None, "im2col", True, None, None, conv={})

    assert strategy.transpose_conv(gemm(256, 9), cfg)       # 9 of 64 lanes -> all of them
    assert strategy.transpose_conv(gemm(128, 36), cfg)
    assert strategy.transpose_conv(gemm(160, 49), cfg)      # MobileNetV2 at 7x7: 192 filter lanes
    assert not strategy.transpose_conv(gemm(70, 49), cfg)   # 70 filters would pad to 128
    assert not strategy.transpose_conv(gemm(576, 196), cfg)  # 14x14: full panels, read in place
    assert not strategy.transpose_conv(gemm(16, 2304), cfg)  # early layer: many pixels, few filters


@needs_simd
@pytest.mark.parametrize("n,c,h,w,k,stride,pad", [(1, 7, 33, 33, 3, 1, 1), (2, 33, 17, 17, 3, 2, 1),
                                                  (1, 100, 7, 7, 3, 1, 1), (1, 16, 20, 20, 5, 2, 2)])
def test_depthwise(n, c, h, w, k, stride, pad):
    text, shape = depthwise_text(n, c, h, w, k, stride, pad)
    fn = compile_standalone(text, min_flops=0)
    x, wt, b = rand(n, c, h, w), rand(c, k, k), rand(c)
    (out,) = fn(x, wt, b)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt[:, None]), torch.from_numpy(b),
                                          stride=stride, padding=pad, groups=c)
    assert out.shape == shape
    assert rel_error(out, expected.numpy()) < 1e-5


@needs_simd
@pytest.mark.parametrize("n,c,h,w,k,stride", [(1, 7, 33, 33, 2, 2), (2, 33, 17, 17, 3, 2), (1, 100, 7, 7, 3, 1)])
def test_maxpool(n, c, h, w, k, stride):
    text, shape = maxpool_text(n, c, h, w, k, stride)
    fn = compile_standalone(text, min_flops=0)
    x = rand(n, c, h, w)
    (out,) = fn(x)
    expected = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, stride)
    assert out.shape == shape
    assert rel_error(out, expected.numpy()) < 1e-6


@needs_simd
def test_matmul_becomes_vector_fma_microkernel():
    """The GEMM kernel, not LLVM's vectorizer, makes the FMA: vector.fma on nr-wide vectors, lowered to
    llvm.intr.fmuladd on vector<nr x f32> in the LLVM dialect."""
    text = lowered(matmul_text(64, 64, 64), min_flops=0)
    fmas = re.findall(r"llvm\.intr\.(?:fma|fmuladd)\b.*", text)
    assert fmas and all(f"vector<{CFG.nr}xf32>" in line for line in fmas)
    assert 'path = "gemm"' in text


@needs_simd
def test_small_contractions_are_a_recorded_decision():
    text = lowered(matmul_text(4, 8, 8))
    assert "vector<64xf32>" not in text and 'path = "gemv"' not in text
    assert re.search(r'path = "small", reason = "\d+ flops, below', text), text
    text = lowered(matmul_text(64, 64, 64))
    assert 'path = "gemm"' in text and "etc_gemm" not in text  # kernel inlined, named functions gone


def test_isa_table_per_target():
    avx512 = isa_for(CpuTarget("x86_64-unknown-linux-gnu", "znver4", "+avx2,+fma,+avx512f"))
    assert (avx512.lanes, avx512.gemm_mr, avx512.gemm_nr) == (16, 6, 64)
    avx2 = isa_for(PRESETS["x86-64-v3"])
    assert avx2.lanes == 8 and avx2.gemm_nr % 8 == 0
    # Epilogue divisions: AVX-512's reciprocal estimate pays, AVX2's division is one op (expand_math.py).
    assert avx512.reciprocal_estimates and not avx2.reciprocal_estimates
    neon = isa_for(PRESETS["aarch64"])
    assert neon.lanes == 4 and neon.gemm_nr % 4 == 0
    assert not isa_for(PRESETS["cortex-m7"]).vectorizes


def test_cross_targets_lower_to_llvm_dialect():
    """The NEON tile (8 x 12) and the no-SIMD target (Cortex-M: plain loops, a recorded decision)
    produce LLVM-dialect code too."""
    for preset in ("aarch64", "cortex-m7"):
        text = lowered(matmul_text(33, 40, 50), PRESETS[preset], min_flops=0)
        assert "llvm.func" in text and "memrefCopy" not in text
        assert ("llvm.intr.fmuladd" in text and "vector<12xf32>" in text) == (preset == "aarch64")
        assert ('reason = "the target has no vector unit' in text) == (preset == "cortex-m7")





@needs_simd
def test_depthwise_and_pooling_vectorize_along_the_output_row():
    """Depthwise convolutions and poolings, unit stride or strided, become vector code along OW."""
    for text in (depthwise_text(1, 8, 20, 20, 3, 1, 1)[0], maxpool_text(1, 8, 20, 20, 2, 1)[0],
                 depthwise_text(1, 8, 20, 20, 3, 2, 1)[0]):
        body = lowered(text)
        assert f"vector<{ISA.lanes}xf32>" in body, body


@pytest.mark.skipif("+avx2" not in HOST.features or "+fma" not in HOST.features, reason="needs AVX2+FMA")
def test_avx2_tile_runs_on_this_host():
    """The x86-64-v3 preset (6 x 16 tile on ymm registers), compiled for and run on this CPU."""
    fn = compile_standalone(matmul_text(100, 70, 33), target="x86-64-v3")
    a, b = rand(100, 70), rand(70, 33)
    (out,) = fn(a, b)
    assert rel_error(out, a.astype(np.float64) @ b) < 1e-5
    text = lowered(matmul_text(100, 70, 33), PRESETS["x86-64-v3"])
    assert "vector<16xf32>" in text and "vector<64xf32>" not in text



def dynamic_rows_text(k: int, n: int, rows: int, batch: int | None = None) -> str:
    """matmul (batched when `batch`) + bias + ReLU on A with a dynamic row count up to `rows`."""
    lead, lead_s = ([batch], f"{batch}x") if batch else ([], "")
    rank = len(lead) + 2
    bounds = ", ".join([f"{batch}, {batch}"] * bool(batch) + [f"1, {rows}", f"{k}, {k}"])
    dims = ", ".join(f"d{i}" for i in range(rank))
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    return f"""
#bias = affine_map<({dims}) -> (d{rank - 1})>
#id = affine_map<({dims}) -> ({dims})>
func.func @f(%x: tensor<{lead_s}?x{k}xf32> {{etc.dim_bounds = array<i64: {bounds}>}}, %w: tensor<{lead_s}{k}x{n}xf32>,
             %b: tensor<{n}xf32>) -> tensor<{lead_s}?x{n}xf32> {{
  %c = arith.constant {rank - 2} : index
  %z = arith.constant 0.0 : f32
  %m = tensor.dim %x, %c : tensor<{lead_s}?x{k}xf32>
  %e = tensor.empty(%m) : tensor<{lead_s}?x{n}xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{lead_s}?x{n}xf32>) -> tensor<{lead_s}?x{n}xf32>
  %mm = {op} ins(%x, %w : tensor<{lead_s}?x{k}xf32>, tensor<{lead_s}{k}x{n}xf32>) outs(%f : tensor<{lead_s}?x{n}xf32>) -> tensor<{lead_s}?x{n}xf32>
  %r = linalg.generic {{indexing_maps = [#bias, #id, #id], iterator_types = [{", ".join(['"parallel"'] * rank)}]}}
      ins(%b, %mm : tensor<{n}xf32>, tensor<{lead_s}?x{n}xf32>) outs(%e : tensor<{lead_s}?x{n}xf32>) {{
  ^bb0(%in: f32, %acc: f32, %out: f32):
    %s = arith.addf %in, %acc : f32
    %t = arith.maximumf %s, %z : f32
    linalg.yield %t : f32
  }} -> tensor<{lead_s}?x{n}xf32>
  return %r : tensor<{lead_s}?x{n}xf32>
}}
"""


@needs_simd
@pytest.mark.parametrize("k,n,batch", [(288, 768, None), (768, 288, None), (64, 100, None), (32, 1000, None),
                                       (48, 256, 3), (2 * CFG.kc if CFG else 8, 70, None)])
def test_dynamic_rows_take_the_gemm_kernel_at_every_row_count(k, n, batch):
    """One kernel for up to 128 rows: whole blocks of mr, the partial block one row at a time
    (one K block or K blocks; a partial column panel; batched), the bias and ReLU fused."""
    fn = compile_standalone(dynamic_rows_text(k, n, 128, batch))
    assert [str(d).split(" at ")[0] for d in fn.decisions] == ["contraction linalg.generic: gemm",
                                                              "epilogue linalg.generic: fused"]
    lead = (batch,) if batch else ()
    w, b = rand(*lead, k, n), rand(n)
    for m in (1, 2, CFG.mr - 1, CFG.mr, CFG.mr + 1, 2 * CFG.mr + 3, 127, 128):
        x = rand(*lead, m, k)
        (out,) = fn(x, w, b)
        assert out.shape == lead + (m, n)
        assert rel_error(out, np.maximum(np.matmul(x.astype(np.float64), w) + b, 0)) < 1e-5


class ConvBnResidual(torch.nn.Module):
    """conv -> BatchNorm (+ the input when the shapes allow: ResNet's residual) -> ReLU: the GEMM
    kernel's epilogue reads an extra operand besides the accumulator."""

    def __init__(self, c, f, k, stride, pad, dilation):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, f, k, stride, pad, dilation=dilation, bias=False)
        self.bn = torch.nn.BatchNorm2d(f)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)
        self.residual = c == f and stride == 1

    def forward(self, x):
        y = self.bn(self.conv(x))
        return torch.relu(y + x if self.residual and y.shape == x.shape else y)


@needs_simd
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c,f,k,stride,pad,dil,h,w", [
    (64, 64, 3, 1, 1, 1, 28, 28),   # residual, 784 pixels: 12 whole panels shared by the threads
    (16, 24, 3, 1, 1, 1, 13, 17),   # 221 pixels: a 29-wide partial panel (its gather kept, masked)
    (16, 24, 3, 2, 1, 1, 29, 31),   # stride 2: every row of a panel a gather
    (8, 32, 3, 1, 2, 2, 20, 23),    # dilation 2
    (3, 64, 7, 2, 3, 1, 40, 40),    # ResNet's stem: K = 147, stride 2
    (10, 70, 5, 1, 0, 1, 19, 25),   # 5x5 unpadded, 70 filters (a partial row block), 315 pixels
    (64, 64, 3, 1, 1, 1, 14, 14),   # 196 pixels: 3 panels and 4 leftover columns as dot products
    (48, 24, 1, 1, 0, 1, 14, 14),   # 1x1 (B read in place): its 4 last columns transposed
    (16, 13, 3, 2, 1, 1, 19, 19),   # stride 2: 100 pixels = 64 + 32 + 4, 13 filters (one row at a time)
    (32, 40, 3, 1, 2, 2, 9, 9),     # dilation 2, 81 pixels: 1 leftover column
])
def test_conv_im2col_per_panel_matches_torch(threads, c, f, k, stride, pad, dil, h, w):
    """The im2col gathered per column panel into a buffer of the thread running the panel
    (`gemm.gather_per_panel`), its epilogue BN + residual + ReLU, on one and two threads."""
    import etc
    from etc.compiler.delegation import CompileSpec
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    model, x = ConvBnResidual(c, f, k, stride, pad, dil).eval(), torch.randn(1, c, h, w)
    # calibrate_threads=0: both threads run, each gathering its panels into its own buffer
    partitioner = CpuPartitioner(num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    program = etc.to_edge(torch.export.export(model, (x,))).to_backend(partitioner).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    with torch.no_grad():
        expected = model(x).numpy()
    for _ in range(5):
        (out,) = method.execute([x.numpy()])
        assert rel_error(out, expected) < 1e-5


@needs_simd
def test_stride_one_im2col_rows_are_contiguous_loads():
    """With stride 1 along the width every whole panel's im2col row is a few masked contiguous loads
    (`gemm.contiguous_row_loads`), no gather; the partial panel keeps one."""
    whole = lowered(conv_text(1, 8, 8, 16, 32, 3, 1, 1)[0], min_flops=0)  # 8x16 pixels: two panels
    assert "llvm.intr.masked.load" in whole and "llvm.intr.masked.gather" not in whole
    partial = lowered(conv_text(1, 8, 8, 13, 32, 3, 1, 1)[0], min_flops=0)  # 104 pixels: 64 + 40
    assert "llvm.intr.masked.load" in partial and "llvm.intr.masked.gather" in partial


@needs_simd
def test_stride_two_im2col_rows_are_contiguous_loads():
    """With stride 2 along the width a whole panel's im2col row is 2*nr contiguous inputs per
    distinct shift, the even ones kept by one permute (`gemm.contiguous_row_loads`): no gather."""
    text = conv_text(1, 8, 16, 32, 32, 3, 2, 1)[0]  # 8x16 output pixels: two whole panels
    whole = lowered(text, min_flops=0)
    assert "llvm.intr.masked.gather" not in whole
    assert re.search(r"llvm.shufflevector %\S+, %\S+ \[0, 2, 4, 6, 8, 10, 12, 14, 16, ", whole), "no even-lane permute"
    x, w, b = rand(1, 8, 16, 32), rand(32, 8, 3, 3), rand(32)
    (out,) = compile_standalone(text, min_flops=0)(x, w, b)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=2,
                                      padding=1).numpy()
    assert rel_error(out, want) < 1e-5


@needs_simd
def test_im2col_too_long_for_a_panel_buffer_is_a_recorded_decision():
    """A K x nr panel buffer over the stack budget keeps the whole im2col, and says so."""
    c = strategy.PANEL_STACK_BYTES // (4 * CFG.nr * 9) + 1
    fn = compile_standalone(conv_text(1, c, 8, 8, 8, 3, 1, 1)[0], min_flops=0)
    (decision,) = [d for d in fn.decisions if d.kind == "convolution"]
    assert decision.path == "gemm" and "the im2col whole" in decision.reason
    x, wt, b = rand(1, c, 8, 8), rand(8, c, 3, 3), rand(8)
    (out,) = fn(x, wt, b)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), padding=1)
    assert rel_error(out, expected.numpy()) < 1e-5


COPY_ROWS = strategy.PANEL_COPY_ROW_BLOCKS * CFG.mr if CFG else 96


@needs_simd
@pytest.mark.parametrize("m,k,n,epilogue", [
    (COPY_ROWS, 70, 130, False),          # the fewest rows that copy: two full panels, a partial one of 2
    (COPY_ROWS + 5, 300, 88, True),       # a partial row block; a partial panel split into vectors; bias + ReLU
    (COPY_ROWS, 7 * (CFG.kc if CFG else 8) // 4, 64, True),  # K in blocks over the copied panel
    (COPY_ROWS + 1, 40, 40, False),       # narrower than a panel: packed per call (no reason: the default)
    (COPY_ROWS - 1, 100, 130, True),      # one row block short: read in place
])
def test_activation_b_copied_per_panel(m, k, n, epilogue):
    """A matmul whose B is an activation read by enough row blocks copies each column panel into a
    contiguous buffer (`gather_per_panel`); the edges of that rule against numpy, with and without
    the fused epilogue, and the blocking each decision records."""
    text = matmul_bias_relu_text(m, k, n) if epilogue else matmul_text(m, k, n)
    fn = compile_standalone(text)
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    (out,) = fn(a, b, bias) if epilogue else fn(a, b)
    expected = a.astype(np.float64) @ b
    if epilogue:
        expected = np.maximum(expected + bias, 0)
    assert rel_error(out, expected) < 1e-5
    reason = [d for d in fn.decisions if d.kind == "contraction"][0].reason
    copied = m >= COPY_ROWS and n >= CFG.nr
    assert ("B copied per column panel" in reason) == copied, reason
    assert ("B read in place" in reason) == (n >= CFG.nr and not copied), reason
    assert ("in blocks of" in reason) == (k > CFG.kc + CFG.kc // 2), reason


@needs_simd
@pytest.mark.parametrize("n,c,hw,f", [
    (1, 40, 14, COPY_ROWS),        # 196 pixels: full panels and a partial one, rows 784 bytes apart
    (2, 24, 7, COPY_ROWS + 5),     # batch 2, 49 pixels, a partial row block
    (1, 16, 24, COPY_ROWS + 40),   # K = 16, 576 pixels: whole panels only
    (1, 40, 14, COPY_ROWS - 1),    # one row block short: read in place
])
def test_1x1_convolution_input_copied_per_panel(n, c, hw, f):
    """A 1x1 convolution's input is a B read in place, [C, H*W] per image, its panel rows an image
    plane apart: copied per column panel by the matmul's rule (`gather_per_panel`), against torch,
    and the decision says which."""
    text, shape = conv_text(n, c, hw, hw, f, 1, 1, 0)
    fn = compile_standalone(text)
    x, wt, b = rand(n, c, hw, hw), rand(f, c, 1, 1), rand(f)
    (out,) = fn(x, wt, b)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b))
    assert out.shape == shape
    assert rel_error(out, expected.numpy()) < 1e-5
    reason = [d for d in fn.decisions if d.kind == "convolution"][0].reason
    assert ("B copied per column panel" in reason) == (f >= COPY_ROWS), reason
    assert ("B read in place" in reason) == (f < COPY_ROWS), reason


@needs_simd
def test_batched_activation_b_copied_per_panel():
    """Attention's scores x V: B batched, each batch's panels copied; and a K too long for a
    panel buffer on the stack, read in place (the decision says which)."""
    bt, m, k, n = 2, COPY_ROWS, 50, 70
    fn = compile_standalone(batch_matmul_text(bt, m, k, n))
    a, b = rand(bt, m, k), rand(bt, k, n)
    (out,) = fn(a, b)
    assert rel_error(out, np.matmul(a.astype(np.float64), b)) < 1e-5
    assert "B copied per column panel" in fn.decisions[0].reason
    long_k = strategy.PANEL_STACK_BYTES // (4 * CFG.nr) + 1
    fn = compile_standalone(matmul_text(COPY_ROWS, long_k, CFG.nr))
    a, b = rand(COPY_ROWS, long_k), rand(long_k, CFG.nr)
    (out,) = fn(a, b)
    assert rel_error(out, a.astype(np.float64) @ b) < 1e-5
    assert "B read in place (a K x" in fn.decisions[0].reason


@needs_simd
def test_activation_b_copied_per_panel_on_two_threads():
    """The threads share the column panels; each copies its own into its own stack buffer."""
    m, k, n = COPY_ROWS + 4, 130, 200
    fn = compile_linalg_text(matmul_bias_relu_text(m, k, n), threads=2)
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    out = fn(a, b, bias)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert "B copied per column panel" in fn.decisions[0].reason
    assert rel_error(out, np.maximum(a.astype(np.float64) @ b + bias, 0)) < 1e-5


def test_row_block_rule():
    """Rows of A in blocks only when A is at least the L2 (2 MiB here) and a quarter of the L2
    holds at least MIN_ROW_BLOCK of its rows; equal blocks of whole mr-row tiles; never over K
    blocks (the accumulator lives in memory there)."""
    cfg = strategy.KernelConfig(16, 6, 64, 2048, kc_strided=128, l2_bytes=2 << 20)
    block = strategy.row_block
    assert block(1500, 384, 384, cfg) == 300  # Whisper-tiny's MLP up: five blocks of 300
    assert block(2048, 256, 256, cfg) == 516  # four blocks, the last of 500 rows
    assert block(1024, 384, 384, cfg) == 0  # 1.5 MB of A: whole
    assert block(1366, 384, 384, cfg) == 276  # just over 2 MiB of A: five blocks
    assert block(197, 768, 768, cfg) == 0  # A of 605 KB stays in L2 whole
    assert block(512, 1024, 1024, cfg) == 0  # a quarter of the L2 holds only 128 of its rows
    assert block(768, 768, 768, cfg) == 0
    assert block(4096, 256, 128, cfg) == 0  # K in blocks
    assert block(-1, 256, 256, cfg) == 0  # dynamic rows


@needs_simd
@pytest.mark.parametrize("kind,m,k,n,threads", [
    ("matmul+epilogue", 2100, 256, 100, 1),  # B copied per panel; five blocks of 420 rows;
                                             # a partial panel of 36 split into vectors
    ("matmul", 2051, 256, 130, 1),           # no epilogue: the contraction is the root; a last
                                             # block of 395 rows (a partial mr block)
    ("matmul+epilogue", 2051, 256, 100, 1),  # a shorter last block and a partial panel: its
                                             # tile's buffer sized by the block (a compile error once)
    ("linear+epilogue", 2100, 256, 70, 1),   # packed panels, equal blocks
    ("linear", 2051, 256, 70, 1),            # packed, no epilogue, a shorter last block
    ("matmul+epilogue", 2051, 256, 200, 2),  # two threads share each block's panels
])
def test_rows_in_blocks(kind, m, k, n, threads):
    """A larger than half the L2: the row blocks (`gemm_match.row_block`) around the column
    panels, on every root the kernel can have, with static and shorter last blocks. Compiled for
    the host with a 2 MiB L2 (the block sizes above), whatever the host's own: the rule is about
    the L2 the code is compiled for (a 512 KiB one holds fewer than MIN_ROW_BLOCK rows of K = 256)."""
    target = dataclasses.replace(HOST, l2_kib=2048)
    cfg = strategy.KernelConfig(CFG.vector_width, CFG.mr, CFG.nr, CFG.kc, l2_bytes=isa_for(target).l2_kib << 10)
    rows = strategy.row_block(m, k, k, cfg)
    assert rows > 0
    text = {"matmul+epilogue": matmul_bias_relu_text, "matmul": matmul_text, "linear+epilogue": linear_relu_text,
            "linear": partial(linear_relu_text, epilogue=False)}[kind](m, k, n)
    fn = compile_linalg_text(text, target=target, threads=threads)
    x = rand(m, k)
    w = rand(n, k) if kind.startswith("linear") else rand(k, n)
    bias = rand(n)
    args = [x, w] + ([bias] if "epilogue" in kind else [])
    out = fn(*args)
    out = out[0] if isinstance(out, (list, tuple)) else out
    expected = x.astype(np.float64) @ (w.T if kind.startswith("linear") else w)
    if "epilogue" in kind:
        expected = np.maximum(expected + bias, 0)
    assert rel_error(out, expected) < 1e-5
    if kind.startswith("matmul"):
        reason = [d for d in fn.decisions if d.kind == "contraction"][0].reason
        assert f"rows in blocks of {rows}" in reason, reason


class _PackedWeights(torch.nn.Module):
    """A Linear over K split into blocks (7000 = 4 x 1750) and a transposed 3x3 convolution (36
    pixels as rows, its filters a packed weight), each read by several row blocks."""

    def __init__(self):
        super().__init__()
        self.long_k = torch.nn.Linear(7000, 130)
        self.conv = torch.nn.Conv2d(40, 192, 3, padding=1)

    def forward(self, x, image):
        return torch.relu(self.long_k(x)), self.conv(image)


@needs_simd
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_weights_prefetched_a_panel_ahead(threads):
    """Weights packed when the blob is built (constants of the program, not inputs): their k loops
    prefetch the next panel or K block (etc-cpu-prefetch-gemm-tiles, where the host's ISA row
    prefetches for f32 tiles), past the last one beyond the weight's end; the results are torch's,
    with the panels shared by two threads too."""
    import etc
    from etc.compiler.delegation import CompileSpec
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    model = _PackedWeights().eval()
    inputs = (torch.randn(37, 7000), torch.randn(1, 40, 6, 6))
    partitioner = CpuPartitioner(num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    program = etc.to_edge(torch.export.export(model, inputs)).to_backend(partitioner).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    with torch.no_grad():
        want = model(*inputs)
    for got, w in zip(method.execute([x.numpy() for x in inputs]), want):
        assert rel_error(got, w.numpy()) < 1e-5
