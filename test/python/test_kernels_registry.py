"""The kernel registry and write_out: names, lookup errors, dynamic-shape outputs."""

import numpy as np
import pytest

from etc.errors import ExecutionError, KernelNotFoundError
from etc.runtime.kernels import get_kernel, kernel, registered_kernels, write_out
from etc.runtime.kernels import registry
from etc.runtime.kernels.common import result_type


def test_core_kernels_are_registered_by_pte_names():
    names = registered_kernels()
    for name in ("aten::add.out", "aten::mul.out", "aten::mm.out", "aten::relu.out", "aten::view_copy.out"):
        assert name in names
        assert callable(get_kernel(name))
    assert isinstance(names, frozenset)


def test_unknown_kernel_names_the_op_and_suggests():
    with pytest.raises(KernelNotFoundError) as info:
        get_kernel("aten::add.Tensor")
    err = info.value
    assert err.operator == "aten::add.Tensor"
    assert "aten::add.Tensor" in str(err)
    assert "aten::add.out" in str(err)


def test_kernel_decorator_registers_every_name_and_refuses_duplicates():
    @kernel("test::dummy.out", "test::dummy.other_out")
    def dummy(self, out):
        return write_out(out, self)

    try:
        x = np.arange(3)
        assert get_kernel("test::dummy.out")(x, np.empty(3, np.int64)).tolist() == [0, 1, 2]
        assert get_kernel("test::dummy.other_out").__wrapped__ is dummy
        with pytest.raises(ValueError):
            kernel("test::dummy.out")(lambda out: out)
        with pytest.raises(ValueError):
            kernel("no_namespace")
    finally:
        registry.unregister_kernel("test::dummy.out")
        registry.unregister_kernel("test::dummy.other_out")


def test_write_out_same_shape_casts_into_storage():
    out = np.zeros((2, 3), np.int32)
    res = write_out(out, np.arange(6, dtype=np.float64).reshape(2, 3) + 0.7)
    assert res is out and res.dtype == np.int32
    assert res.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_write_out_smaller_result_reviews_storage_prefix():
    storage = np.full(12, -1.0, np.float32)
    out = storage.reshape(3, 4)
    res = write_out(out, np.ones((2, 3), np.float32))
    assert res.shape == (2, 3)
    assert np.shares_memory(res, storage)
    assert storage[:6].tolist() == [1.0] * 6 and storage[6:].tolist() == [-1.0] * 6


def test_write_out_larger_result_is_an_execution_error():
    with pytest.raises(ExecutionError, match="does not fit"):
        write_out(np.zeros((2, 2), np.float32), np.ones((3, 2), np.float32))


def test_write_out_broadcasts_scalars_and_handles_empty():
    out = np.zeros((0, 3), np.float32)
    assert write_out(out, np.zeros((0, 3))).shape == (0, 3)
    assert write_out(np.zeros((), np.int64), 5).item() == 5


@pytest.mark.parametrize("operands, expected", [
    ((np.zeros(2, np.int32), 2.5), np.float32),
    ((np.zeros(2, np.int32), 2), np.int32),
    ((np.zeros(2, np.uint8), np.zeros((), np.int64)), np.uint8),
    ((np.zeros(2, np.int32), np.zeros((), np.float64)), np.float64),
    ((np.zeros(2, np.float16), np.zeros((), np.float64)), np.float16),
    ((np.zeros(2, np.float16), np.zeros(2, np.int64)), np.float16),
    ((np.zeros(2, np.bool_), 3), np.int64),
    ((np.zeros(2, np.bool_), True), np.bool_),
    ((np.zeros(2, np.int8), np.zeros(2, np.uint8)), np.int16),
    ((np.zeros((), np.int32), 1.5), np.float32),
    ((np.zeros((), np.float64), np.zeros(3, np.int64)), np.float64),
])
def test_result_type_matches_aten(operands, expected):
    assert result_type(*operands) == np.dtype(expected)


def test_kernel_errors_are_execution_errors_naming_the_operator():
    with pytest.raises(ExecutionError) as info:
        get_kernel("aten::mm.out")(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32), np.zeros((2, 3)))
    assert info.value.operator == "aten::mm.out" and "aten::mm.out" in str(info.value)
    with pytest.raises(ExecutionError) as info:  # a numpy exception, converted
        get_kernel("aten::view_copy.out")(np.zeros(6, np.float32), [4, -1], np.zeros((4, 1), np.float32))
    assert info.value.operator == "aten::view_copy.out"


def test_blas_thread_count_can_be_read_and_set():
    from etc.runtime.kernels.threads import blas_threads, set_blas_threads
    before = blas_threads()
    if before is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    try:
        assert set_blas_threads(1) and blas_threads() == 1
    finally:
        set_blas_threads(before)
    assert blas_threads() == before


def test_view_copy_onto_its_own_input_storage_is_a_no_op():
    storage = np.arange(12, dtype=np.float32)
    x = storage.reshape(3, 4)
    out = storage.reshape(2, 6)  # the planner placed the view's result on the input's bytes
    res = get_kernel("aten::view_copy.out")(x, [2, 6], out)
    assert res is out and res.tolist() == np.arange(12).reshape(2, 6).tolist()
    # a permuted view of the same bytes is not the same value: it must really copy
    storage2 = np.arange(6, dtype=np.float32)
    res = get_kernel("aten::permute_copy.out")(storage2.reshape(2, 3), [1, 0], np.zeros((3, 2), np.float32))
    assert res.tolist() == [[0, 3], [1, 4], [2, 5]]


def test_bfloat16_bits_convert_like_torch():
    import torch
    from etc.runtime.kernels.common import bfloat16_to_float32, float32_to_bfloat16
    x = np.concatenate([np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3,
                        np.array([np.inf, -np.inf, 0.0, -0.0, 1.00390625, 1.01171875, 3.4e38, 1e-40], np.float32)])
    expected = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    bits = float32_to_bfloat16(x)
    np.testing.assert_array_equal(bits, expected)
    np.testing.assert_array_equal(bfloat16_to_float32(bits),
                                  torch.from_numpy(expected.view(np.int16)).view(torch.bfloat16).float().numpy())
    assert np.isnan(bfloat16_to_float32(float32_to_bfloat16(np.array([np.nan], np.float32))))[0]


def test_bfloat16_tagged_tensors_compute_in_float32_and_round_back():
    import torch
    from etc.runtime.kernels.common import BFLOAT16, float32_to_bfloat16
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)
    a, b = float32_to_bfloat16(a32).view(BFLOAT16), float32_to_bfloat16(b32).view(BFLOAT16)
    ta, tb = (torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16) for x in (a, b))

    def bits(t):
        return t.view(torch.int16).numpy().view(np.uint16)

    out = np.zeros((3, 4), BFLOAT16)
    res = get_kernel("aten::add.out")(a, b, 1, out)
    assert res is out and res.dtype.metadata == BFLOAT16.metadata
    np.testing.assert_array_equal(res.view(np.uint16), bits(ta + tb))
    # bfloat16 in, float32 out; float32 in, bfloat16 out; several outs; a smaller (dynamic) result
    f = get_kernel("aten::_to_copy.out")(a, False, None, np.zeros((3, 4), np.float32))
    np.testing.assert_array_equal(f, ta.float().numpy())
    back = get_kernel("aten::_to_copy.out")(a32, False, None, np.zeros((3, 4), BFLOAT16))
    np.testing.assert_array_equal(back.view(np.uint16), bits(torch.from_numpy(a32).to(torch.bfloat16)))
    vals, idx = get_kernel("aten::max.dim_max")(a, 1, False, np.zeros(3, BFLOAT16), np.zeros(3, np.int64))
    tv, ti = ta.max(dim=1)
    np.testing.assert_array_equal(vals.view(np.uint16), bits(tv))
    np.testing.assert_array_equal(idx, ti.numpy())
    small = get_kernel("aten::sum.IntList_out")(a, [1], False, None, np.zeros(8, BFLOAT16))
    assert small.shape == (3,)
    np.testing.assert_allclose(small.view(np.uint16).astype(np.uint32) << 16, bits(ta.sum(1)).astype(np.uint32) << 16,
                               atol=1 << 16)
