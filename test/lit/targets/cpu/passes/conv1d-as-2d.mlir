// RUN: etc-opt %s --split-input-file --etc-cpu-conv1d-as-2d | filecheck %s

// Whisper's second convolution (stride 2, padding 1): the input and the filter get a height of 1
// (edge.unsqueeze at dim 2), the convolution is 2-D with stride, padding and dilation 1, 0 and 1
// in that dimension, and its result is squeezed back.
// CHECK-LABEL: func.func @stride2
// CHECK: %[[X:.*]] = "edge.unsqueeze"(%arg0) {dim = 2 : i64} : (tensor<1x8x30xf32>) -> tensor<1x8x1x30xf32>
// CHECK: %[[W:.*]] = "edge.unsqueeze"(%arg1) {dim = 2 : i64} : (tensor<6x8x3xf32>) -> tensor<6x8x1x3xf32>
// CHECK: %[[Y:.*]] = "edge.convolution"(%[[X]], %[[W]], %arg2) {dilation = array<i64: 1, 1>, groups = 1 : i64, {{.*}}output_padding = array<i64: 0, 0>, padding = array<i64: 0, 1>, stride = array<i64: 1, 2>, transposed = false} : (tensor<1x8x1x30xf32>, tensor<6x8x1x3xf32>, tensor<6xf32>) -> tensor<1x6x1x15xf32>
// CHECK: %[[R:.*]] = "edge.squeeze_dim"(%[[Y]]) {dim = 2 : i64} : (tensor<1x6x1x15xf32>) -> tensor<1x6x15xf32>
// CHECK: return %[[R]]
func.func @stride2(%x: tensor<1x8x30xf32>, %w: tensor<6x8x3xf32>, %b: tensor<6xf32>) -> tensor<1x6x15xf32> {
  %c = "edge.convolution"(%x, %w, %b) {dilation = array<i64: 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, output_padding = array<i64: 0>, padding = array<i64: 1>, stride = array<i64: 2>, transposed = false} : (tensor<1x8x30xf32>, tensor<6x8x3xf32>, tensor<6xf32>) -> tensor<1x6x15xf32>
  return %c : tensor<1x6x15xf32>
}

// -----

// A depthwise 1-D convolution with dilation 2 and no bias: groups and dilation carried over.
// CHECK-LABEL: func.func @depthwise_dilated
// CHECK: "edge.convolution"{{.*}}dilation = array<i64: 1, 2>, groups = 4 : i64{{.*}}padding = array<i64: 0, 2>, stride = array<i64: 1, 1>{{.*}} : (tensor<2x4x1x9xf32>, tensor<4x1x1x3xf32>) -> tensor<2x4x1x9xf32>
// CHECK: "edge.squeeze_dim"
func.func @depthwise_dilated(%x: tensor<2x4x9xf32>, %w: tensor<4x1x3xf32>) -> tensor<2x4x9xf32> {
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 2>, groups = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0>, padding = array<i64: 2>, stride = array<i64: 1>, transposed = false} : (tensor<2x4x9xf32>, tensor<4x1x3xf32>) -> tensor<2x4x9xf32>
  return %c : tensor<2x4x9xf32>
}

// -----

// Left alone: a dynamic length, a 2-D convolution, a transposed 1-D convolution.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: edge.unsqueeze
// CHECK-COUNT-3: "edge.convolution"
// CHECK-NOT: edge.squeeze_dim
func.func @left_alone(%x: tensor<1x8x?xf32>, %w: tensor<6x8x3xf32>, %x2: tensor<1x8x5x5xf32>, %w2: tensor<6x8x3x3xf32>, %x3: tensor<1x8x9xf32>, %w3: tensor<8x6x3xf32>) -> (tensor<1x6x?xf32>, tensor<1x6x5x5xf32>, tensor<1x6x11xf32>) {
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0>, padding = array<i64: 1>, stride = array<i64: 1>, transposed = false} : (tensor<1x8x?xf32>, tensor<6x8x3xf32>) -> tensor<1x6x?xf32>
  %c2 = "edge.convolution"(%x2, %w2) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x8x5x5xf32>, tensor<6x8x3x3xf32>) -> tensor<1x6x5x5xf32>
  %c3 = "edge.convolution"(%x3, %w3) {dilation = array<i64: 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0>, padding = array<i64: 0>, stride = array<i64: 1>, transposed = true} : (tensor<1x8x9xf32>, tensor<8x6x3xf32>) -> tensor<1x6x11xf32>
  return %c, %c2, %c3 : tensor<1x6x?xf32>, tensor<1x6x5x5xf32>, tensor<1x6x11xf32>
}
