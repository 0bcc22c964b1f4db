// RUN: etc-opt %s --split-input-file --etc-cpu-drop-padding-taps | filecheck %s

// DeepLabV3's ASPP branch of dilation 24 on a 14x14 map: every output's eight outer taps read
// padding only. The filter is sliced to its centre tap in both dimensions (a slice per dimension:
// prepack-constants folds them for a constant weight) and the convolution becomes a 1x1 without
// padding or dilation, recorded as a `taps` decision.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "taps", op = "edge.convolution", path = "pruned", reason = "3x3 -> 1x1: the other taps read only padding"
// CHECK-LABEL: func.func @aspp_rate24
// CHECK: %[[W:.*]] = ml_program.global_load_const @w
// CHECK: %[[W1:.*]] = "edge.slice_tensor"(%[[W]]) {dim = 2 : i64, end = 2 : i64, {{.*}}start = 1 : i64, step = 1 : i64} : (tensor<4x8x3x3xf32>) -> tensor<4x8x1x3xf32>
// CHECK: %[[W2:.*]] = "edge.slice_tensor"(%[[W1]]) {dim = 3 : i64, end = 2 : i64, {{.*}}start = 1 : i64, step = 1 : i64} : (tensor<4x8x1x3xf32>) -> tensor<4x8x1x1xf32>
// CHECK: "edge.convolution"(%{{.*}}, %[[W2]], %{{.*}}) {dilation = array<i64: 1, 1>, {{.*}}padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x8x14x14xf32>, tensor<4x8x1x1xf32>, tensor<4xf32>) -> tensor<1x4x14x14xf32>
ml_program.global private @w(#ml_program.extern : tensor<4x8x3x3xf32>) : tensor<4x8x3x3xf32>
ml_program.global private @b(#ml_program.extern : tensor<4xf32>) : tensor<4xf32>
func.func @aspp_rate24(%x: tensor<1x8x14x14xf32>) -> tensor<1x4x14x14xf32> {
  %w = ml_program.global_load_const @w : tensor<4x8x3x3xf32>
  %b = ml_program.global_load_const @b : tensor<4xf32>
  %c = "edge.convolution"(%x, %w, %b) {dilation = array<i64: 24, 24>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 24, 24>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x8x14x14xf32>, tensor<4x8x3x3xf32>, tensor<4xf32>) -> tensor<1x4x14x14xf32>
  return %c : tensor<1x4x14x14xf32>
}

// -----

// A 1x20 map: the 5x5 filter's rows other than the centre read padding only (padding 2 -> 0),
// its columns all read input (kept, padding 2 and dilation 1 unchanged).
// CHECK: {kind = "taps", op = "edge.convolution", path = "pruned", reason = "5x5 -> 1x5: the other taps read only padding"
// CHECK-LABEL: func.func @one_row
// CHECK: "edge.slice_tensor"(%arg1) {dim = 2 : i64, end = 3 : i64, {{.*}}start = 2 : i64, step = 1 : i64} : (tensor<3x3x5x5xf32>) -> tensor<3x3x1x5xf32>
// CHECK-NOT: edge.slice_tensor
// CHECK: "edge.convolution"{{.*}}padding = array<i64: 0, 2>{{.*}} : (tensor<1x3x1x20xf32>, tensor<3x3x1x5xf32>) -> tensor<1x3x1x20xf32>
func.func @one_row(%x: tensor<1x3x1x20xf32>, %w: tensor<3x3x5x5xf32>) -> tensor<1x3x1x20xf32> {
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 2, 2>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x3x1x20xf32>, tensor<3x3x5x5xf32>) -> tensor<1x3x1x20xf32>
  return %c : tensor<1x3x1x20xf32>
}

// -----

// Dilation 12 on 14x14: each outer tap reads the input for two output rows. Nothing to drop,
// nothing recorded.
// CHECK-NOT: etc.cpu.decisions
// CHECK-LABEL: func.func @all_live
// CHECK: "edge.convolution"{{.*}}padding = array<i64: 12, 12>{{.*}} : (tensor<1x8x14x14xf32>, tensor<4x8x3x3xf32>) -> tensor<1x4x14x14xf32>
func.func @all_live(%x: tensor<1x8x14x14xf32>, %w: tensor<4x8x3x3xf32>) -> tensor<1x4x14x14xf32> {
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 12, 12>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 12, 12>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x8x14x14xf32>, tensor<4x8x3x3xf32>) -> tensor<1x4x14x14xf32>
  return %c : tensor<1x4x14x14xf32>
}

// -----

// A 3x3 dilation-2 filter with padding 1 on a 3x3 map (one output): its outer taps read -1 and 3,
// padding only, but the centre tap alone would need padding -1 (a crop): all taps stay, and the
// decision says why.
// CHECK: {kind = "taps", op = "edge.convolution", path = "all-taps", reason = "the live taps would need padding -1 (a crop, which aten.convolution cannot express)"
// CHECK-LABEL: func.func @uneven
// CHECK: "edge.convolution"{{.*}}padding = array<i64: 1, 1>{{.*}} : (tensor<1x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x1x1xf32>
func.func @uneven(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x1x1xf32> {
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 2, 2>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x1x1xf32>
  return %c : tensor<1x2x1x1xf32>
}

// -----

// One padding value for both dimensions (torch's padding="valid" exports as [0]): read as two; no
// padding means no dead taps: nothing changes, nothing recorded.
// CHECK-NOT: etc.cpu.decisions
// CHECK-LABEL: func.func @valid
// CHECK: "edge.convolution"{{.*}}padding = array<i64: 0>{{.*}} : (tensor<1x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x1x1xf32>
func.func @valid(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x1x1xf32> {
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0>, stride = array<i64: 2, 2>, transposed = false} : (tensor<1x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x1x1xf32>
  return %c : tensor<1x2x1x1xf32>
}
