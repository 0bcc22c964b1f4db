// RUN: etc-opt %s --split-input-file --verify-diagnostics
// Verifiers reject malformed ops with a located diagnostic.

func.func @edge_float_only(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'edge.exp' (aten::exp) produces f16, bf16, f32, f64 tensors only}}
  %0 = "edge.exp"(%x) : (tensor<4xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @edge_complex(%x: tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>> {
  // expected-error @+1 {{element type complex<f32> is not supported by its kernel}}
  %0 = "edge.neg"(%x) : (tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>>
  return %0 : tensor<4xcomplex<f32>>
}

// -----

func.func @edge_bitwise_on_float(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'edge.bitwise_not' (aten::bitwise_not) takes i8, ui8, i16, i32, i64, i1 tensors only}}
  %0 = "edge.bitwise_not"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @aten_result_not_a_tensor(%x: tensor<4xf32>) -> i32 {
  // expected-error @+1 {{'aten.relu' (aten::relu) must produce ranked tensors}}
  %0 = "aten.relu"(%x) : (tensor<4xf32>) -> i32
  return %0 : i32
}

// -----

func.func @aten_missing_operand() {
  // expected-error @+1 {{op expects exactly 1 operands, but got 0}}
  %0 = "aten.relu"() : () -> tensor<4xf32>
  return
}

// -----

func.func @delegate_without_backend(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'backend.delegate' needs a non-empty string 'backend_id'}}
  %0 = "backend.delegate"(%x) {backend_id = "", callee = @f, compile_specs = {}, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
