"""Portable kernels of the quantization ops (runtime/kernels/quantized.py) against their
reference implementations in torch.ao and torchao, on random inputs: odd and empty shapes,
non-contiguous inputs, per-tensor/per-channel/per-token/per-group parameters.

Also checks the op table (dialects/quantized_ops.py) against the schemas torch and torchao
register and against ExecuTorch's quantized kernel library, and that every op of the table
has a kernel.
"""

import numpy as np
import pytest
import torch

import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed
from etc.dialects.quantized_ops import QUANTIZED_OPS, out_variants
from etc.runtime.kernels import get_kernel, registered_kernels
from etc.schema import ScalarType

QD = torch.ops.quantized_decomposed
I8 = int(ScalarType.CHAR)
F32 = int(ScalarType.FLOAT)
SHAPES = [(3, 5), (2, 3, 7), (1,), (0, 4), (4, 1, 3)]


def _random(shape, seed=0, scale=3.0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def _non_contiguous(x: torch.Tensor) -> np.ndarray:
    """The same values as a strided numpy view (every other element of a wider array)."""
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],) if x.dim() else (2,), dtype=x.numpy().dtype)
    view = wide[..., ::2]
    view[...] = x.numpy()
    assert x.numel() <= 1 or not view.flags.c_contiguous or x.shape[-1] <= 1
    return view


def _out(like_shape, dtype):
    return np.zeros(like_shape, dtype=dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_quantize_dequantize_per_tensor(shape):
    x = _random(shape)
    want = QD.quantize_per_tensor(x, 0.037, -5, -128, 127, torch.int8)
    got = get_kernel("quantized_decomposed::quantize_per_tensor.out")(
        _non_contiguous(x), 0.037, -5, -128, 127, I8, _out(shape, np.int8))
    np.testing.assert_array_equal(got, want.numpy())
    got_t = get_kernel("quantized_decomposed::quantize_per_tensor.Tensor_out")(
        x.numpy(), np.array([0.037]), np.array([-5]), -128, 127, I8, _out(shape, np.int8))
    np.testing.assert_array_equal(got_t, want.numpy())
    want_dq = QD.dequantize_per_tensor(want, 0.037, -5, -128, 127, torch.int8)
    got_dq = get_kernel("quantized_decomposed::dequantize_per_tensor.out")(
        want.numpy(), 0.037, -5, -128, 127, I8, None, _out(shape, np.float32))
    np.testing.assert_array_equal(got_dq, want_dq.numpy())
    got_dq2 = get_kernel("quantized_decomposed::dequantize_per_tensor.tensor2_out")(
        want.numpy(), np.array(0.037), np.array(-5), np.array(-128), np.array(127), I8, None,
        _out(shape, np.float32))
    np.testing.assert_array_equal(got_dq2, want_dq.numpy())


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("shape", [(3, 5), (1,), (2, 1, 9)])
def test_choose_qparams(shape, symmetric):
    x = _random(shape, seed=1) + 0.5
    op = QD.choose_qparams_symmetric.tensor if symmetric else QD.choose_qparams.tensor
    name = "choose_qparams_symmetric" if symmetric else "choose_qparams"
    want_s, want_z = op(x, -128, 127, 2 ** -12, torch.int8)
    s, z = get_kernel(f"quantized_decomposed::{name}.Tensor_out")(
        _non_contiguous(x), -128, 127, 2 ** -12, I8, _out((1,), np.float64), _out((1,), np.int64))
    np.testing.assert_array_equal(s, want_s.numpy())
    np.testing.assert_array_equal(z, want_z.numpy())


def test_choose_qparams_of_a_constant_tensor_uses_eps():
    x = torch.zeros(4)
    want_s, want_z = QD.choose_qparams.tensor(x, -128, 127, 2 ** -12, torch.int8)
    s, z = get_kernel("quantized_decomposed::choose_qparams.Tensor_out")(
        x.numpy(), -128, 127, 2 ** -12, I8, _out((1,), np.float64), _out((1,), np.int64))
    assert float(s[0]) == float(want_s) and int(z[0]) == int(want_z)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_dequantize_per_channel(axis):
    x = _random((4, 5, 3), seed=2)
    n = x.shape[axis]
    scales = torch.rand(n, generator=torch.Generator().manual_seed(3)) * 0.05 + 0.01
    zps = torch.randint(-10, 10, (n,), generator=torch.Generator().manual_seed(4))
    want = QD.quantize_per_channel(x, scales, zps, axis % 3, -128, 127, torch.int8)
    got = get_kernel("quantized_decomposed::quantize_per_channel.out")(
        _non_contiguous(x), scales.numpy(), zps.numpy(), axis, -128, 127, I8, _out(x.shape, np.int8))
    np.testing.assert_array_equal(got, want.numpy())
    for zero_points in (zps, None):
        want_dq = QD.dequantize_per_channel(want, scales, zero_points, axis % 3, -128, 127, torch.int8)
        got_dq = get_kernel("quantized_decomposed::dequantize_per_channel.out")(
            want.numpy(), scales.numpy(), None if zero_points is None else zero_points.numpy(), axis, -128, 127,
            I8, None, _out(x.shape, np.float32))
        np.testing.assert_array_equal(got_dq, want_dq.numpy())


@pytest.mark.parametrize("shape", [(3, 8), (2, 3, 5), (1, 1)])
def test_per_token_ops(shape):
    x = _random(shape, seed=5)
    want_s, want_z = QD.choose_qparams_per_token_asymmetric(x, torch.int8)
    rows = shape[:-1] + (1,)
    s, z = get_kernel("quantized_decomposed::choose_qparams_per_token_asymmetric.out")(
        _non_contiguous(x), I8, _out(rows, np.float64), _out(rows, np.int64))
    np.testing.assert_allclose(s, want_s.numpy(), rtol=1e-7)
    np.testing.assert_array_equal(z, want_z.numpy())
    want_q = QD.quantize_per_token(x, want_s, want_z, -128, 127, torch.int8)
    q = get_kernel("quantized_decomposed::quantize_per_token.out")(
        x.numpy(), want_s.numpy(), want_z.numpy(), -128, 127, I8, _out(shape, np.int8))
    np.testing.assert_array_equal(q, want_q.numpy())
    want_dq = QD.dequantize_per_token(want_q, want_s, want_z, -128, 127, torch.int8, torch.float32)
    dq = get_kernel("quantized_decomposed::dequantize_per_token.out")(
        want_q.numpy(), want_s.numpy(), want_z.numpy(), -128, 127, I8, F32, _out(shape, np.float32))
    np.testing.assert_allclose(dq, want_dq.numpy(), rtol=1e-6)


def test_per_channel_group_ops():
    w = _random((6, 64), seed=6)
    scales = torch.rand(6, 2, generator=torch.Generator().manual_seed(7)) * 0.5 + 0.1
    zps = torch.randint(-3, 3, (6, 2), generator=torch.Generator().manual_seed(8))
    want = QD.quantize_per_channel_group(w, scales, zps, -8, 7, torch.int8, 32)
    got = get_kernel("quantized_decomposed::quantize_per_channel_group.out")(
        w.numpy(), scales.numpy(), zps.numpy(), -8, 7, I8, 32, _out(w.shape, np.int8))
    np.testing.assert_array_equal(got, want.numpy())
    for zero_points in (zps, None):
        want_dq = QD.dequantize_per_channel_group(want, scales, zero_points, -8, 7, torch.int8, 32, torch.float32)
        got_dq = get_kernel("quantized_decomposed::dequantize_per_channel_group.out")(
            want.numpy(), scales.numpy(), None if zero_points is None else zero_points.numpy(), -8, 7, I8, 32, F32,
            _out(w.shape, np.float32))
        np.testing.assert_allclose(got_dq, want_dq.numpy(), rtol=1e-6)
    from etc.errors import ExecutionError
    with pytest.raises(ExecutionError, match="group size 24 does not divide"):
        get_kernel("quantized_decomposed::quantize_per_channel_group.out")(
            w.numpy(), scales.numpy(), zps.numpy(), -8, 7, I8, 24, _out(w.shape, np.int8))


@pytest.mark.parametrize("mapping", ["ASYMMETRIC", "SYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR"])
@pytest.mark.parametrize("block", [[1, 64], [1, 32], [4, 64], [2, 16]])
def test_torchao_affine_ops(mapping, block):
    pytest.importorskip("torchao")
    import torchao.quantization.quant_primitives  # noqa: F401 - registers torch.ops.torchao

    ta = torch.ops.torchao
    x = _random((4, 64), seed=9)
    qmin, qmax = (-8, 7) if block == [1, 32] else (-128, 127)
    want_s, want_z = ta.choose_qparams_affine(x, mapping, block, torch.int8, qmin, qmax, None, None, torch.int8)
    s, z = get_kernel("torchao::choose_qparams_affine.out")(
        _non_contiguous(x), mapping, block, I8, qmin, qmax, None, None, I8, False,
        _out(tuple(want_s.shape), np.float32), _out(tuple(want_z.shape), np.int8))
    np.testing.assert_array_equal(s, want_s.numpy())
    np.testing.assert_array_equal(z, want_z.numpy())
    want_q = ta.quantize_affine(x, block, want_s, want_z, torch.int8, qmin, qmax)
    q = get_kernel("torchao::quantize_affine.out")(x.numpy(), block, want_s.numpy(), want_z.numpy(), I8, qmin, qmax,
                                                   _out(x.shape, np.int8))
    np.testing.assert_array_equal(q, want_q.numpy())
    want_dq = ta.dequantize_affine(want_q, block, want_s, want_z, torch.int8, qmin, qmax)
    dq = get_kernel("torchao::dequantize_affine.out")(want_q.numpy(), block, want_s.numpy(), want_z.numpy(), I8,
                                                      qmin, qmax, F32, _out(x.shape, np.float32))
    np.testing.assert_array_equal(dq, want_dq.numpy())


def test_quantized_add_matches_dequantize_add_requantize():
    a = torch.randint(-128, 128, (3, 4), dtype=torch.int8)
    b = torch.randint(-128, 128, (3, 4), dtype=torch.int8)
    fa = QD.dequantize_per_tensor(a, 0.02, 3, -128, 127, torch.int8)
    fb = QD.dequantize_per_tensor(b, 0.05, -7, -128, 127, torch.int8)
    want = QD.quantize_per_tensor(fa + fb, 0.06, 1, -128, 127, torch.int8)
    got = get_kernel("quantized_decomposed::add.out")(a.numpy(), 0.02, 3, -128, 127, b.numpy(), 0.05, -7, -128, 127,
                                                      0.06, 1, -128, 127, _out((3, 4), np.int8))
    np.testing.assert_array_equal(got, want.numpy())


# ------------------------------------------------------------------------ the op table
def test_every_table_op_has_a_kernel():
    assert sorted(set(out_variants().values()) - registered_kernels()) == []


def test_table_schemas_match_the_registered_ones():
    """The functional schemas are what torch.ao / torchao register (so the importer's op
    arguments line up), and the out variants ExecuTorch has are ExecuTorch's."""
    pytest.importorskip("torchao")
    import torchao.quantization.quant_primitives  # noqa: F401

    for op in QUANTIZED_OPS:
        name = op.schema.split("(", 1)[0]
        namespace, rest = name.split("::")
        base, _, overload = rest.partition(".")
        registered = getattr(getattr(getattr(torch.ops, namespace), base), overload or "default")._schema
        assert str(torch._C.parse_schema(op.schema)) == str(registered), name


def test_executorch_out_variants_are_executorch_kernels():
    yaml_text = _executorch_quantized_yaml()
    for op in QUANTIZED_OPS:
        present = f"func: {op.out_schema}" in yaml_text
        assert present != op.etc_only, op.out_schema


def _executorch_quantized_yaml() -> str:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("executorch is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "kernels" / "quantized" / "quantized.yaml"
    if not path.exists():
        pytest.skip("executorch has no quantized.yaml")
    return path.read_text()


# ------------------------------------------------------------------ folded ops (etc_quantized::)
def _close_int8(got, want):
    """Equal up to a rounding tie (the folded kernels accumulate exactly, torch in float32)."""
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max(initial=0) <= 1 and (diff == 0).mean() > 0.95


@pytest.mark.parametrize("groups,stride,padding", [(1, 1, 0), (1, 2, 1), (4, 1, 1)])
def test_folded_conv2d_is_dequantize_conv_relu_quantize(groups, stride, padding):
    g = torch.Generator().manual_seed(10)
    x = torch.randint(-128, 128, (2, 4, 7, 5), dtype=torch.int8, generator=g)
    w = torch.randint(-127, 128, (8, 4 // groups, 3, 3), dtype=torch.int8, generator=g)
    ws = torch.rand(8, generator=g) * 0.01 + 0.001
    b = torch.randn(8, generator=g)
    xf = QD.dequantize_per_tensor(x, 0.02, 3, -128, 127, torch.int8)
    wf = QD.dequantize_per_channel(w, ws, None, 0, -127, 127, torch.int8)
    y = torch.relu(torch.nn.functional.conv2d(xf, wf, b, stride, padding, 1, groups))
    want = QD.quantize_per_tensor(y, 0.05, -128, -128, 127, torch.int8)
    got = get_kernel("etc_quantized::conv2d.out")(
        x.numpy(), 0.02, 3, w.numpy(), ws.numpy(), b.numpy(), [stride] * 2, [padding] * 2, [1, 1], groups, 0.05, -128,
        -128, 127, _out(tuple(want.shape), np.int8))
    _close_int8(got, want.numpy())


def test_folded_linear_and_add():
    g = torch.Generator().manual_seed(11)
    x = torch.randint(-128, 128, (3, 16), dtype=torch.int8, generator=g)
    w = torch.randint(-127, 128, (5, 16), dtype=torch.int8, generator=g)
    ws = torch.rand(5, generator=g) * 0.01 + 0.001
    b = torch.randn(5, generator=g)
    xf = QD.dequantize_per_tensor(x, 0.03, -7, -128, 127, torch.int8)
    y = torch.nn.functional.linear(xf, QD.dequantize_per_channel(w, ws, None, 0, -127, 127, torch.int8), b)
    want = QD.quantize_per_tensor(y.clamp(-1, 1), 0.02, 4, -128, 127, torch.int8)
    got = get_kernel("etc_quantized::linear.out")(x.numpy(), 0.03, -7, w.numpy(), ws.numpy(), b.numpy(), 0.02, 4,
                                                  -46, 54, _out((3, 5), np.int8))
    _close_int8(got, want.numpy())
    a = torch.randint(-128, 128, (2, 9), dtype=torch.int8, generator=g)
    want_add = QD.quantize_per_tensor(torch.relu(QD.dequantize_per_tensor(a, 0.1, 2, -128, 127, torch.int8)
                                                 + QD.dequantize_per_tensor(a, 0.1, 2, -128, 127, torch.int8)),
                                      0.3, -128, -128, 127, torch.int8)
    got_add = get_kernel("etc_quantized::add.out")(a.numpy(), 0.1, 2, a.numpy(), 0.1, 2, 0.3, -128, -128, 127,
                                                   _out((2, 9), np.int8))
    _close_int8(got_add, want_add.numpy())


def test_folded_dynamic_linear_per_tensor_int8_and_per_row_int4():
    from etc.runtime.kernels.quantized import pack_int4

    g = torch.Generator().manual_seed(12)
    x = torch.randn(3, 8, generator=g)
    w = torch.randint(-127, 128, (4, 8), dtype=torch.int8, generator=g)
    ws = torch.rand(4, generator=g) * 0.01 + 0.001
    s, z = QD.choose_qparams.tensor(x, -128, 127, 2 ** -12, torch.int8)
    xq = QD.dequantize_per_tensor.tensor(QD.quantize_per_tensor.tensor(x, s, z, -128, 127, torch.int8), s, z, -128,
                                         127, torch.int8)
    want = xq @ QD.dequantize_per_channel(w, ws, None, 0, -127, 127, torch.int8).T
    got = get_kernel("etc_quantized::linear_dynamic.out")(x.numpy(), "per_tensor", 2 ** -12, w.numpy(), 8, 8,
                                                          ws.numpy(), None, None, _out((3, 4), np.float32))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)

    pytest.importorskip("torchao")
    import torchao.quantization.quant_primitives  # noqa: F401
    ta = torch.ops.torchao
    w4 = torch.randint(-8, 8, (4, 8), dtype=torch.int8, generator=g)
    w4s = torch.rand(4, 2, generator=g) * 0.1 + 0.01
    w4z = torch.randint(-2, 2, (4, 2), dtype=torch.int8, generator=g)
    s, z = ta.choose_qparams_affine(x, "ASYMMETRIC", [1, 8], torch.int8, -128, 127, None, None, torch.int8)
    xq = ta.dequantize_affine(ta.quantize_affine(x, [1, 8], s, z, torch.int8, -128, 127), [1, 8], s, z, torch.int8,
                              -128, 127)
    want = xq @ ta.dequantize_affine(w4, [1, 4], w4s, w4z, torch.int8, -8, 7).T
    got = get_kernel("etc_quantized::linear_dynamic.out")(x.numpy(), "per_row", 0.0, pack_int4(w4.numpy()), 4, 4,
                                                          w4s.numpy(), w4z.numpy(), None, _out((3, 4), np.float32))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
