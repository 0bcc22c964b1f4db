"""The portable kernel library: numpy kernels for ExecuTorch's out-variant operators.

Importing this package registers every kernel; `get_kernel("aten::add.out")` finds one
(KernelNotFoundError, with close names, if none), `registered_kernels()` lists them.

Calling convention (what the interpreter does for a KernelCall):

- arguments in the out-variant schema's order, out tensors last: tensors are numpy
  arrays (any strides), `Tensor?` may be None, `Tensor[]`/`Tensor?[]` are lists,
  Scalars/ints/floats/bools/strs are Python values, int lists are lists, ScalarType
  arguments are ints (`etc.schema.ScalarType`), MemoryFormat arguments are ignored;
- out tensors are contiguous views of planned memory with the current (or upper-bound)
  shape; a kernel writes its result through `common.write_out` and returns the written
  view (a smaller dynamic-shape result re-views the front of the storage);
- several outs (`max.dim_max`, `native_layer_norm.out`) -> a tuple of views; one
  `Tensor[]` out (`split_copy.Tensor_out`, `unbind_copy.int_out`) -> a list of views;
- non-tensor ops (`aten::sym_size.int`, `aten::_local_scalar_dense.default`) return a
  Python number;
- failures raise `ExecutionError` naming the operator (numpy's own exceptions are
  converted by the registry); numpy warnings are silenced (ATen wraps on integer
  overflow and gives inf/nan on float division by zero).

Modules: `elementwise` (unary/binary tables, comparisons, where, clamp, activations),
`reductions` (sum/mean/var/amax/max.dim/argmax/any, cumsum, sort/topk), `linalg`
(mm/bmm/addmm), `shape` (the *_copy view ops, cat, pads, repeat), `indexing`
(index/index_put/gather/scatter), `convolution` (convolution, im2col/col2im), `pooling`,
`normalization` (layer/group/batch norm), `nn` (softmax, embedding, upsampling, grid_sampler), `creation` (full/arange/scalar_tensor/empty/random),
`backward` (training gradients), `extras` (linear, var_mean, dim-order ops), `quantized` (the
PT2E/torchao quantization ops under ExecuTorch's quantized kernel names),
`scans` (cummax/cummin, logcumsumexp, median/nanmedian, nansum, nan_to_num, aminmax),
`misc` (non-Core aliases, elementwise math, outer/addr/cross, take/bucketize, norms, 1-d/3-d upsampling).
`coverage` maps Core ATen to out-variant names and lists what has no kernel.

Known differences from ATen (all covered by the tests' tolerances or documented there):

- bfloat16 tensors arrive as their bits, uint16 arrays tagged `common.BFLOAT16` (the
  runtime tags them); the registry runs the kernel on float32 stand-ins and rounds its
  bfloat16 outs once (ties to even); a bfloat16 `dtype=` argument means float32 inside
  (`common.dtype_arg`). float8 tensors arrive as their bits (uint8) and are not
  interpreted as floats here; complex dtypes
  (hence `_fft_r2c`/`_fft_c2r`) have no kernel (see `coverage.EXCLUDED`);
- float16 is accumulated in float32 (reductions, matmul, conv, norms, softmax) and
  rounded once: a few half ulps from ATen, which rounds at other points;
- ties in sort/topk (stable=False in ATen) come out in index order;
- gelu(+inf) is +inf (ATen's vectorized CPU gelu gives NaN);
- erf/erfinv are our own (no scipy): ~1e-15 relative in double; float32 erf is a
  rational fit evaluated in float32, within 4e-7 of ATen (so gelu for x << 0, where
  1 + erf cancels, differs by ~1e-6 absolute);
- uint8 bilinear upsampling rounds after each pass as ATen does, but ATen's fixed-point
  weights can still move a rare pixel by one;
- random ops (rand, randn, randperm, bernoulli, native_dropout in training) use numpy's
  generator: right distribution, not torch's bits;
- float -> integer conversion of NaN/inf/out-of-range values is unspecified (as in C++).
"""

from etc.runtime.kernels.registry import get_kernel, has_kernel, kernel, register_kernel, registered_kernels
from etc.runtime.kernels.common import write_out
from etc.runtime.kernels import (backward, convolution, creation, elementwise, extras, indexing, linalg,  # noqa: F401
                                misc, nn, normalization, pooling, quantized, reductions, scans, shape)  # (importing registers the kernels)

__all__ = ["get_kernel", "has_kernel", "kernel", "register_kernel", "registered_kernels", "write_out"]
