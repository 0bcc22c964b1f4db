// RUN: etc-opt %s --split-input-file --etc-cpu-winograd-convs="min-channels=0 min-tiles=1" | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-winograd-convs | filecheck %s --check-prefix=RULE
// RUN: etc-opt %s --split-input-file --etc-cpu-winograd-convs="min-channels=0 min-tiles=0" | filecheck %s --check-prefix=SCALAR

// A 3x3 'same' convolution on a 4x4 map (2x2 tiles of 2x2 outputs), thresholds lowered so that it
// is taken. The filter of ones transforms to U = (G 1)(G 1)^T, G 1 = [1, 1.5, 0.5, 1]: one new
// constant [16, O, C]. The input is padded by the convolution's padding (1 each side; 4x4 is whole
// tiles), rows 0..3 of each tile are stride-2 slices combined by B^T (d0 - d2, d1 + d2, d2 - d1,
// d1 - d3), then the columns the same way; the 16 planes are stacked into V [16, C, tiles], one
// bmm, the output transform A^T (m0 + m1 + m2, m1 - m2 - m3) on both sides, the blocks interleaved
// back into the map, plus the bias.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "convolution", op = "edge.convolution", path = "winograd", reason = "F(2x2,3x3) over 4 tiles: 1 -> 1 channels"
// CHECK: ml_program.global private @winograd_filter(dense<{{\[\[\[}}1.000000e+00]], {{\[\[}}1.500000e+00]], {{\[\[}}5.000000e-01]], {{\[\[}}1.000000e+00]], {{\[\[}}1.500000e+00]], {{\[\[}}2.250000e+00]], {{\[\[}}7.500000e-01]], {{\[\[}}1.500000e+00]], {{\[\[}}5.000000e-01]], {{\[\[}}7.500000e-01]], {{\[\[}}2.500000e-01]], {{\[\[}}5.000000e-01]], {{\[\[}}1.000000e+00]], {{\[\[}}1.500000e+00]], {{\[\[}}5.000000e-01]], {{\[\[}}1.000000e+00]]]> : tensor<16x1x1xf32>)
// CHECK-LABEL: func.func @same
// CHECK: %[[U:.*]] = ml_program.global_load_const @winograd_filter : tensor<16x1x1xf32>
// CHECK: %[[P:.*]] = "edge.constant_pad_nd"(%arg0) {{.*}}pad = array<i64: 1, 1, 1, 1>{{.*}} -> tensor<1x1x6x6xf32>
// CHECK: %[[R0:.*]] = "edge.slice_tensor"(%[[P]]) {dim = 2 : i64, end = 3 : i64, {{.*}}start = 0 : i64, step = 2 : i64} : (tensor<1x1x6x6xf32>) -> tensor<1x1x2x6xf32>
// CHECK: %[[R2:.*]] = "edge.slice_tensor"(%[[P]]) {dim = 2 : i64, end = 5 : i64, {{.*}}start = 2 : i64, step = 2 : i64}
// CHECK: "edge.sub_tensor"(%[[R0]], %[[R2]])
// CHECK: "edge.slice_tensor"({{.*}}) {dim = 3 : i64, end = 3 : i64, {{.*}}start = 0 : i64, step = 2 : i64} : (tensor<1x1x2x6xf32>) -> tensor<1x1x2x2xf32>
// CHECK-COUNT-16: "edge.unsqueeze"({{.*}}) {dim = 0 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x1x2x2xf32>
// CHECK: %[[V:.*]] = "edge.cat"({{.*}}) {dim = 0 : i64{{.*}} -> tensor<16x1x1x2x2xf32>
// CHECK: %[[V2:.*]] = "edge.view"(%[[V]]) {{.*}}size = array<i64: 16, 1, 4>
// CHECK: %[[M:.*]] = "edge.bmm"(%[[U]], %[[V2]]) {{.*}}: (tensor<16x1x1xf32>, tensor<16x1x4xf32>) -> tensor<16x1x4xf32>
// CHECK: %[[M2:.*]] = "edge.view"(%[[M]]) {{.*}}size = array<i64: 4, 4, 1, 2, 2>
// CHECK: "edge.select_int"(%[[M2]]) {dim = 0 : i64, index = 0 : i64{{.*}} : (tensor<4x4x1x2x2xf32>) -> tensor<4x1x2x2xf32>
// CHECK: "edge.cat"({{.*}}) {dim = 2 : i64{{.*}} -> tensor<1x2x2x2x2xf32>
// CHECK: %[[Y:.*]] = "edge.view"({{.*}}) {{.*}}size = array<i64: 1, 1, 4, 4>
// CHECK: %[[B:.*]] = "edge.view"(%{{.*}}) {{.*}}size = array<i64: 1, 1, 1, 1>
// CHECK: %[[S:.*]] = "edge.add_tensor"(%[[Y]], %[[B]])
// CHECK-NOT: edge.convolution
// CHECK: return %[[S]]
// With the default thresholds: one channel is too few, the decision says why.
// RULE: {kind = "convolution", op = "edge.convolution", path = "direct", reason = "1 -> 1 channels: the transforms cost more than the multiplies saved (C*O/(C+O) = 0 < 32)"
// RULE-LABEL: func.func @same
// RULE: "edge.convolution"
// A target without vector units (min-tiles=0): nothing rewritten, nothing recorded.
// SCALAR-NOT: etc.cpu.decisions
// SCALAR-LABEL: func.func @same
// SCALAR: "edge.convolution"
ml_program.global private @w(dense<1.0> : tensor<1x1x3x3xf32>) : tensor<1x1x3x3xf32>
ml_program.global private @b(dense<0.5> : tensor<1xf32>) : tensor<1xf32>
func.func @same(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %w = ml_program.global_load_const @w : tensor<1x1x3x3xf32>
  %b = ml_program.global_load_const @b : tensor<1xf32>
  %c = "edge.convolution"(%x, %w, %b) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  return %c : tensor<1x1x4x4xf32>
}

// -----

// Two images, an odd 5x3 output (padding 0 on a 7x5 map): 3x2 tiles per image, the input padded
// at the far edges only to whole tiles (8x6), the images folded into the tiles (V permuted to
// [16, C, N, TH, TW]), the result permuted back to [N, O, ...] and cropped to 5x3. No bias.
// CHECK: {kind = "convolution", op = "edge.convolution", path = "winograd", reason = "F(2x2,3x3) over 12 tiles: 2 -> 3 channels"
// CHECK-LABEL: func.func @batch_odd
// CHECK: "edge.constant_pad_nd"(%arg0) {{.*}}pad = array<i64: 0, 1, 0, 1>{{.*}} : (tensor<2x2x7x5xf32>) -> tensor<2x2x8x6xf32>
// CHECK: "edge.permute"({{.*}}) {dims = array<i64: 0, 2, 1, 3, 4>{{.*}} -> tensor<16x2x2x3x2xf32>
// CHECK: "edge.bmm"({{.*}}) : (tensor<16x3x2xf32>, tensor<16x2x12xf32>) -> tensor<16x3x12xf32>
// CHECK: "edge.view"({{.*}}) {{.*}}size = array<i64: 4, 4, 3, 6, 2>
// CHECK: "edge.permute"({{.*}}) {dims = array<i64: 1, 0, 2, 3>{{.*}} -> tensor<2x3x6x4xf32>
// CHECK: "edge.slice_tensor"({{.*}}) {dim = 2 : i64, end = 5 : i64, {{.*}}start = 0 : i64, step = 1 : i64} : (tensor<2x3x6x4xf32>) -> tensor<2x3x5x4xf32>
// CHECK: %[[Y:.*]] = "edge.slice_tensor"({{.*}}) {dim = 3 : i64, end = 3 : i64, {{.*}}start = 0 : i64, step = 1 : i64} : (tensor<2x3x5x4xf32>) -> tensor<2x3x5x3xf32>
// CHECK-NEXT: return %[[Y]]
ml_program.global private @w2(dense<0.25> : tensor<3x2x3x3xf32>) : tensor<3x2x3x3xf32>
func.func @batch_odd(%x: tensor<2x2x7x5xf32>) -> tensor<2x3x5x3xf32> {
  %w = ml_program.global_load_const @w2 : tensor<3x2x3x3xf32>
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = false} : (tensor<2x2x7x5xf32>, tensor<3x2x3x3xf32>) -> tensor<2x3x5x3xf32>
  return %c : tensor<2x3x5x3xf32>
}

// -----

// Not candidates, nothing recorded: a stride-2 3x3, a dilated 3x3, a 5x5, a grouped 3x3.
// CHECK-NOT: etc.cpu.decisions
// CHECK-LABEL: func.func @not_candidates
// CHECK-COUNT-4: "edge.convolution"
ml_program.global private @w3(dense<1.0> : tensor<4x4x3x3xf32>) : tensor<4x4x3x3xf32>
ml_program.global private @w5(dense<1.0> : tensor<4x4x5x5xf32>) : tensor<4x4x5x5xf32>
ml_program.global private @wg(dense<1.0> : tensor<4x2x3x3xf32>) : tensor<4x2x3x3xf32>
func.func @not_candidates(%x: tensor<1x4x8x8xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %w3 = ml_program.global_load_const @w3 : tensor<4x4x3x3xf32>
  %w5 = ml_program.global_load_const @w5 : tensor<4x4x5x5xf32>
  %wg = ml_program.global_load_const @wg : tensor<4x2x3x3xf32>
  %s2 = "edge.convolution"(%x, %w3) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>, transposed = false} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32>
  %d2 = "edge.convolution"(%x, %w3) {dilation = array<i64: 2, 2>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 2, 2>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
  %k5 = "edge.convolution"(%x, %w5) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 2, 2>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x4x8x8xf32>, tensor<4x4x5x5xf32>) -> tensor<1x4x8x8xf32>
  %g2 = "edge.convolution"(%x, %wg) {dilation = array<i64: 1, 1>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x4x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x8x8xf32>
  return %s2, %d2, %k5, %g2 : tensor<1x4x4x4xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}

// -----

// Candidates left direct, each with its reason: a weight that is a function argument (its
// transform would run on every call; under the default thresholds its 4 channels are the first
// reason) and, under the default thresholds, a 64-channel
// convolution on a 7x7 map (16 tiles; taken with the thresholds lowered).
// CHECK: {kind = "convolution", op = "edge.convolution", path = "direct", reason = "the weight is not a constant with data (its transform is computed when compiling)"
// RULE: {kind = "convolution", op = "edge.convolution", path = "direct", reason = "4 -> 4 channels: the transforms cost more than the multiplies saved (C*O/(C+O) = 2 < 32)"
// RULE-SAME: {kind = "convolution", op = "edge.convolution", path = "direct", reason = "16 output tiles of 2x2 (fewer than 49): the batched GEMM is too narrow"
// CHECK-LABEL: func.func @direct
// CHECK: "edge.convolution"
// CHECK: "edge.bmm"
// CHECK-NOT: "edge.convolution"
// RULE-LABEL: func.func @direct
// RULE-COUNT-2: "edge.convolution"
ml_program.global private @w64(dense<1.0> : tensor<64x64x3x3xf32>) : tensor<64x64x3x3xf32>
func.func @direct(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x3x3xf32>, %y: tensor<1x64x7x7xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x64x7x7xf32>) {
  %c = "edge.convolution"(%x, %w) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
  %w64 = ml_program.global_load_const @w64 : tensor<64x64x3x3xf32>
  %d = "edge.convolution"(%y, %w64) {dilation = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, transposed = false} : (tensor<1x64x7x7xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x7x7xf32>
  return %c, %d : tensor<1x4x8x8xf32>, tensor<1x64x7x7xf32>
}
