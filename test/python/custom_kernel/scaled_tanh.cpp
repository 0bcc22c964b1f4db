// etc_ext::scaled_tanh.out(Tensor x, Tensor bias, float scale=2.0, *, Tensor(a!) out) -> Tensor(a!)
// out = tanh(x + bias) * scale, float32, bias broadcast along x's last dimension.
// As ExecuTorch's kernel-library-custom-aten-kernel docs describe: an out-variant function taking the
// KernelRuntimeContext first, registered under its schema name by EXECUTORCH_LIBRARY.
#include <cmath>

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/kernel_includes.h>

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::resize_tensor;

Tensor& scaled_tanh_out(KernelRuntimeContext& ctx, const Tensor& x, const Tensor& bias, double scale, Tensor& out) {
  ET_KERNEL_CHECK(ctx, x.scalar_type() == ScalarType::Float && bias.scalar_type() == ScalarType::Float &&
                      out.scalar_type() == ScalarType::Float, InvalidArgument, out);
  ET_KERNEL_CHECK(ctx, resize_tensor(out, x.sizes()) == Error::Ok, InvalidArgument, out);
  const ssize_t n = x.numel();
  const ssize_t width = bias.numel();
  ET_KERNEL_CHECK(ctx, width > 0 && x.dim() > 0 && x.size(x.dim() - 1) == width, InvalidArgument, out);
  const float* in = x.const_data_ptr<float>();
  const float* b = bias.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (ssize_t i = 0; i < n; ++i) {
    o[i] = static_cast<float>(std::tanh(in[i] + b[i % width]) * scale);
  }
  return out;
}

}  // namespace

EXECUTORCH_LIBRARY(etc_ext, "scaled_tanh.out", scaled_tanh_out);
