// RUN: etc-opt %s --split-input-file --etc-cpu-window-kernels | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-window-kernels="lanes=8 rows=1" | filecheck %s --check-prefix=AVX2
// RUN: etc-opt %s --split-input-file --etc-cpu-window-kernels="lanes=8 plane-epilogue=true" | filecheck %s --check-prefix=PLANE

// MobileNetV2's stride-2 depthwise block as torch-mlir gives it (padded input, bias broadcast as
// the init, BN folded, ReLU6 as one generic): one kernel, reading the unpadded input. Channels,
// then output rows (two per step), then 16-wide column blocks; each tap reads 32 contiguous
// inputs and keeps the odd or even lanes (taps kw = 1, 2 share one load); the bias starts the
// accumulator; ReLU6 runs on it before the one store. Output row 0 reads the top padding row:
// its kh = 0 taps are skipped; the first column block's kw = 0 tap is shifted right one lane,
// the pad value in front. The 56-wide row is a static first block, a loop over the next two,
// and an 8-wide last block, all reads inside the row (nothing masked).
// CHECK: module attributes {etc.cpu.decisions = [{kind = "window", op = "linalg.depthwise_conv_2d_nchw_chw", path = "window"
// CHECK-SAME: {kind = "padding", op = "tensor.pad", path = "fused"
// CHECK-SAME: {kind = "epilogue", op = "linalg.generic", path = "fused"
// CHECK-LABEL: func.func @dw3x3s2_relu6
// CHECK-NOT: tensor.pad
// CHECK-NOT: linalg.broadcast
// CHECK: scf.for %[[N:.*]] = %c0 to %c1 step %c1
// CHECK: scf.for %[[C:.*]] = %c0 to %c96 step %c1
// CHECK-COUNT-9: tensor.extract %arg1[%[[C]], %{{.*}}, %{{.*}}] : tensor<96x3x3xf32>
// CHECK: tensor.extract %arg2[%[[C]]] : tensor<96xf32>
// CHECK: %[[L0:.*]] = vector.transfer_read %arg0[%[[N]], %[[C]], %{{.*}}, %c0], %{{.*}} {in_bounds = [true]} : tensor<1x96x112x112xf32>, vector<32xf32>
// CHECK: vector.shuffle %[[L0]], %{{.*}} [32, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29] : vector<32xf32>, vector<32xf32>
// CHECK-COUNT-6: math.fma
// CHECK-NOT: math.fma
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%[[N]], %[[C]], %c0, %c0] {in_bounds = [true]} : vector<16xf32>, tensor<1x96x56x56xf32>
// CHECK: scf.for %[[OH:.*]] = %c1 to %c55 step %c2
// CHECK: scf.for %[[OW:.*]] = %c16 to %c48 step %c16
// CHECK: %[[A:.*]] = vector.transfer_read %arg0[%[[N]], %[[C]], %{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<1x96x112x112xf32>, vector<32xf32>
// CHECK: %[[AO:.*]] = vector.shuffle %[[A]], %[[A]] [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31] : vector<32xf32>, vector<32xf32>
// CHECK: math.fma %[[AO]], %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: %[[B:.*]] = vector.transfer_read %arg0
// CHECK: vector.shuffle %[[B]], %[[B]] [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
// CHECK: vector.shuffle %[[B]], %[[B]] [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31]
// CHECK-COUNT-6: math.fma
// CHECK: arith.cmpf ogt, %{{.*}} : vector<16xf32>
// CHECK: arith.select
// CHECK: arith.cmpf olt
// CHECK: arith.select
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%[[N]], %[[C]], %[[OH]], %[[OW]]] {in_bounds = [true]} : vector<16xf32>, tensor<1x96x56x56xf32>
// CHECK: vector.transfer_write %{{.*}}[%[[N]], %[[C]], %[[OH]], %c48] {in_bounds = [true]} : vector<8xf32>
// Channels are independent: a threaded entry gives each thread a chunk of them.
// CHECK: } {etc.thread_split}
// CHECK: } {etc.cpu.path = "window", etc.cpu.window = "depthwise 3x3 stride 2x2 on 1x96x112x112 padded 1,1 -> 56x56, 1 consumer(s) fused"}
// CHECK-NOT: linalg.generic
// AVX2-LABEL: func.func @dw3x3s2_relu6
// AVX2: scf.for %{{.*}} = %c1 to %c56 step %c1
// AVX2: scf.for %{{.*}} = %c8 to %c56 step %c8
// AVX2: vector.transfer_read {{.*}} vector<16xf32>
// AVX2: vector.shuffle {{.*}} [1, 3, 5, 7, 9, 11, 13, 15] : vector<16xf32>, vector<16xf32>
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> ()>
func.func @dw3x3s2_relu6(%arg0: tensor<1x96x112x112xf32>, %arg1: tensor<96x3x3xf32>, %arg2: tensor<96xf32>) -> tensor<1x96x56x56xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %cst_0 = arith.constant dense<6.000000e+00> : tensor<f32>
  %cst_1 = arith.constant dense<0.000000e+00> : tensor<f32>
  %padded = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %cst : f32
  } : tensor<1x96x112x112xf32> to tensor<1x96x114x114xf32>
  %0 = tensor.empty() : tensor<1x96x56x56xf32>
  %b = linalg.broadcast ins(%arg2 : tensor<96xf32>) outs(%0 : tensor<1x96x56x56xf32>) dimensions = [0, 2, 3]
  %1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%padded, %arg1 : tensor<1x96x114x114xf32>, tensor<96x3x3xf32>) outs(%b : tensor<1x96x56x56xf32>) -> tensor<1x96x56x56xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1, %cst_1, %cst_0 : tensor<1x96x56x56xf32>, tensor<f32>, tensor<f32>) outs(%0 : tensor<1x96x56x56xf32>) {
  ^bb0(%in: f32, %zero: f32, %six: f32, %out: f32):
    %4 = arith.cmpf ogt, %in, %zero : f32
    %5 = arith.select %4, %in, %zero : f32
    %6 = arith.cmpf olt, %six, %5 : f32
    %7 = arith.select %6, %six, %5 : f32
    linalg.yield %7 : f32
  } -> tensor<1x96x56x56xf32>
  return %2 : tensor<1x96x56x56xf32>
}

// -----

// Max pooling: -inf fill is the identity, so the first tap starts the running maximum
// (maximumf: NaN wins, as in torch); stride-1 taps are plain unaligned loads; 7-wide rows
// use 8-lane vectors with masked stores.
// CHECK-LABEL: func.func @maxpool3x3s1
// CHECK-NOT: linalg.fill
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[T0:.*]] = vector.transfer_read %arg0{{.*}} : tensor<2x3x9x9xf32>, vector<8xf32>
// CHECK-NOT: vector.shuffle
// CHECK: %[[T1:.*]] = vector.transfer_read %arg0
// CHECK: arith.maximumf %[[T0]], %[[T1]] : vector<8xf32>
// CHECK-COUNT-7: arith.maximumf
// CHECK: vector.transfer_write {{.*}} : vector<8xf32>, tensor<2x3x7x7xf32>
// CHECK: etc.cpu.path = "window"
func.func @maxpool3x3s1(%x: tensor<2x3x9x9xf32>) -> tensor<2x3x7x7xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %0 = tensor.empty() : tensor<2x3x7x7xf32>
  %1 = linalg.fill ins(%ninf : f32) outs(%0 : tensor<2x3x7x7xf32>) -> tensor<2x3x7x7xf32>
  %k = tensor.empty() : tensor<3x3xf32>
  %2 = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %k : tensor<2x3x9x9xf32>, tensor<3x3xf32>) outs(%1 : tensor<2x3x7x7xf32>) -> tensor<2x3x7x7xf32>
  return %2 : tensor<2x3x7x7xf32>
}

// -----

// Average pooling: the sum pool and its divide generic (a constant captured from outside the
// body) are one kernel; the divisor is broadcast once. A division is a long-latency epilogue
// (4 output rows per step, the division marked).
// CHECK-LABEL: func.func @avgpool2x2s2
// CHECK: %[[NINE:.*]] = vector.broadcast %cst{{.*}} : f32 to vector<8xf32>
// CHECK: scf.for
// CHECK: arith.addf {{.*}} : vector<8xf32>
// CHECK: arith.divf %{{.*}}, %[[NINE]] {etc.latency_bound} : vector<8xf32>
// CHECK: vector.transfer_write
// CHECK-NOT: linalg.generic
// A division is no transcendental: with plane-epilogue it stays in the register block.
// PLANE-LABEL: func.func @avgpool2x2s2
// PLANE: scf.for
// PLANE: arith.divf {{.*}} {etc.latency_bound} : vector<8xf32>
// PLANE-NEXT: vector.transfer_write
// PLANE-NOT: applied to each finished plane
// PLANE: etc.cpu.path = "window"
func.func @avgpool2x2s2(%x: tensor<1x4x14x14xf32>) -> tensor<1x4x7x7xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %four = arith.constant 4.000000e+00 : f32
  %0 = tensor.empty() : tensor<1x4x7x7xf32>
  %1 = linalg.fill ins(%zero : f32) outs(%0 : tensor<1x4x7x7xf32>) -> tensor<1x4x7x7xf32>
  %k = tensor.empty() : tensor<2x2xf32>
  %2 = linalg.pooling_nchw_sum {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%x, %k : tensor<1x4x14x14xf32>, tensor<2x2xf32>) outs(%1 : tensor<1x4x7x7xf32>) -> tensor<1x4x7x7xf32>
  %3 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<1x4x7x7xf32>) outs(%0 : tensor<1x4x7x7xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = arith.divf %in, %four : f32
    linalg.yield %4 : f32
  } -> tensor<1x4x7x7xf32>
  return %3 : tensor<1x4x7x7xf32>
}

// -----

// What the pass does not take is visible: an NHWC pooling keeps its op, with the reason; a
// depthwise result used twice keeps its consumers (nothing fused), the op itself is taken.
// CHECK: etc.cpu.decisions = [{kind = "window", op = "linalg.pooling_nhwc_max", path = "loops", reason = "pooling_nhwc_max: NHWC window ops are not handled"
// CHECK-SAME: {kind = "window", op = "linalg.depthwise_conv_2d_nchw_chw", path = "window"
// CHECK-LABEL: func.func @not_taken
// CHECK: linalg.pooling_nhwc_max {{.*}}etc.cpu.path = "loops: pooling_nhwc_max: NHWC window ops are not handled"
// CHECK-LABEL: func.func @two_users
// CHECK: etc.cpu.path = "window", etc.cpu.window = "depthwise 3x3 stride 1x1 on 1x4x8x8 -> 6x6"}
// CHECK: linalg.generic
// CHECK: arith.negf
func.func @not_taken(%x: tensor<1x6x6x4xf32>) -> tensor<1x3x3x4xf32> {
  %k = tensor.empty() : tensor<2x2xf32>
  %e = tensor.empty() : tensor<1x3x3x4xf32>
  %r = linalg.pooling_nhwc_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%x, %k : tensor<1x6x6x4xf32>, tensor<2x2xf32>) outs(%e : tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32>
  return %r : tensor<1x3x3x4xf32>
}
func.func @two_users(%x: tensor<1x4x8x8xf32>, %w: tensor<4x3x3xf32>, %init: tensor<1x4x6x6xf32>) -> (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) {
  %1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x4x8x8xf32>, tensor<4x3x3xf32>) outs(%init : tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %e = tensor.empty() : tensor<1x4x6x6xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1 : tensor<1x4x6x6xf32>) outs(%e : tensor<1x4x6x6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.negf %in : f32
    linalg.yield %3 : f32
  } -> tensor<1x4x6x6xf32>
  return %1, %2 : tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
}

// -----

// A pad the kernel cannot read through (padding with 1.0, not the convolution's 0) and a
// consumer it cannot apply in registers (a per-row bias: neither per channel nor the output's
// shape) stay passes of their own, each a decision with its reason: nothing is dropped silently.
// CHECK: etc.cpu.decisions = [{kind = "window", op = "linalg.depthwise_conv_2d_nchw_chw", path = "window"
// CHECK-SAME: {kind = "padding", op = "tensor.pad", path = "copy", reason = "pads with 1.0, not the dw window's identity 0.0"
// CHECK-SAME: {kind = "epilogue", op = "linalg.generic", path = "second-pass", reason = "operand 1 is neither the output's shape, per channel, nor a scalar tensor"
// CHECK-LABEL: func.func @pad_one_row_bias
// CHECK: tensor.pad
// CHECK: etc.cpu.window = "depthwise 3x3 stride 1x1 on 1x4x10x10 -> 8x8"
// CHECK: linalg.generic
// CHECK: arith.addf
func.func @pad_one_row_bias(%x: tensor<1x4x8x8xf32>, %w: tensor<4x3x3xf32>, %row: tensor<8xf32>) -> tensor<1x4x8x8xf32> {
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %one : f32
  } : tensor<1x4x8x8xf32> to tensor<1x4x10x10xf32>
  %e = tensor.empty() : tensor<1x4x8x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%p, %w : tensor<1x4x10x10xf32>, tensor<4x3x3xf32>) outs(%init : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1, %row : tensor<1x4x8x8xf32>, tensor<8xf32>) outs(%e : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %b: f32, %out: f32):
    %3 = arith.addf %in, %b : f32
    linalg.yield %3 : f32
  } -> tensor<1x4x8x8xf32>
  return %2 : tensor<1x4x8x8xf32>
}

// -----

// A pooling whose one window is the whole unpadded plane (KWS's average over the feature map)
// is a reduction of each contiguous plane: collapsed to NxCx(H*W), reduced along the last loop.
// CHECK-LABEL: func.func @global_avg_pool
// CHECK-NOT: linalg.pooling_nchw_sum
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0], [1], [2, 3]] : tensor<1x64x25x5xf32> into tensor<1x64x125xf32>
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: arith.addf
// CHECK: tensor.expand_shape {{.*}} into tensor<1x64x1x1xf32>
func.func @global_avg_pool(%x: tensor<1x64x25x5xf32>) -> tensor<1x64x1x1xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x64x1x1xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x64x1x1xf32>) -> tensor<1x64x1x1xf32>
  %k = tensor.empty() : tensor<25x5xf32>
  %r = linalg.pooling_nchw_sum {dilations = dense<1> : vector<2xi64>, strides = dense<[25, 5]> : vector<2xi64>}
      ins(%x, %k : tensor<1x64x25x5xf32>, tensor<25x5xf32>) outs(%init : tensor<1x64x1x1xf32>) -> tensor<1x64x1x1xf32>
  return %r : tensor<1x64x1x1xf32>
}

// -----

// EfficientNet's depthwise block, on rows of five vectors: a SiLU-like consumer (x / (1 + exp(-x)))
// is a long dependency chain after each row's taps: 4 output rows per step (`rows_per_step`
// gives a row this wide 2 without it), the interior rows 1..12 as three steps of 4, and its
// divisions marked latency-bound (etc-cpu-expand-math keeps a sigmoid's a division).
// CHECK-LABEL: func.func @dw3x3_silu
// CHECK: arith.divf {{.*}} {etc.latency_bound} : vector<16xf32>
// CHECK: scf.for %{{.*}} = %c1 to %c13 step %c4
// CHECK-COUNT-4: arith.divf {{.*}} {etc.latency_bound} : vector<16xf32>
// CHECK: } {etc.thread_split}
// CHECK: } {etc.cpu.path = "window"
// With plane-epilogue (the AVX2 row): the register blocks store the taps' sums; the SiLU is a loop
// over the channel's 14 stored rows (its first vector, the loop over the full ones, the last),
// reading and writing the plane.
// PLANE-LABEL: func.func @dw3x3_silu
// PLANE: scf.for %{{.*}} = %c1 to %c13 step %c4
// PLANE-NOT: math.exp
// PLANE: scf.for %[[ROW:.*]] = %c0 to %c14 step %c1 iter_args(%[[PLANE:.*]] = %{{.*}})
// PLANE: vector.transfer_read %[[PLANE]][%{{.*}}, %{{.*}}, %[[ROW]], %c0]
// PLANE: math.exp {{.*}} : vector<8xf32>
// PLANE-NOT: etc.latency_bound
// PLANE: scf.for %{{.*}} = %c8 to %c64 step %c8
// PLANE: math.exp {{.*}} : vector<8xf32>
// PLANE: math.exp {{.*}} : vector<8xf32>
// PLANE: } {etc.thread_split}
// PLANE: applied to each finished plane
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @dw3x3_silu(%x: tensor<1x8x14x72xf32>, %w: tensor<8x3x3xf32>) -> tensor<1x8x14x72xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %zero : f32
  } : tensor<1x8x14x72xf32> to tensor<1x8x16x74xf32>
  %e = tensor.empty() : tensor<1x8x14x72xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x8x14x72xf32>) -> tensor<1x8x14x72xf32>
  %c = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%padded, %w : tensor<1x8x16x74xf32>, tensor<8x3x3xf32>) outs(%init : tensor<1x8x14x72xf32>) -> tensor<1x8x14x72xf32>
  %s = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c : tensor<1x8x14x72xf32>) outs(%e : tensor<1x8x14x72xf32>) {
  ^bb0(%v: f32, %o: f32):
    %n = arith.negf %v : f32
    %ex = math.exp %n : f32
    %d = arith.addf %ex, %one : f32
    %q = arith.divf %v, %d : f32
    linalg.yield %q : f32
  } -> tensor<1x8x14x72xf32>
  return %s : tensor<1x8x14x72xf32>
}

// -----

// A keyword-spotting depthwise layer: output rows of 5 columns, one 8-lane vector each. A row's
// 9 taps are one dependent chain of FMAs, so a step computes 8 rows (`rows_per_step`): the
// interior rows 1..23 as two steps of 8 and one of 7, each step 8 (then 7) masked stores.
// CHECK-LABEL: func.func @dw3x3_narrow_rows
// CHECK: scf.for %{{.*}} = %c1 to %c17 step %c8
// CHECK-COUNT-8: vector.transfer_write {{.*}} : vector<8xf32>, tensor<1x4x25x5xf32>
// CHECK: scf.yield
// CHECK-COUNT-7: vector.transfer_write {{.*}} : vector<8xf32>, tensor<1x4x25x5xf32>
// CHECK: } {etc.thread_split}
func.func @dw3x3_narrow_rows(%x: tensor<1x4x25x5xf32>, %w: tensor<4x3x3xf32>) -> tensor<1x4x25x5xf32> {
  %zero = arith.constant 0.0 : f32
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %zero : f32
  } : tensor<1x4x25x5xf32> to tensor<1x4x27x7xf32>
  %e = tensor.empty() : tensor<1x4x25x5xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x25x5xf32>) -> tensor<1x4x25x5xf32>
  %c = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%padded, %w : tensor<1x4x27x7xf32>, tensor<4x3x3xf32>) outs(%init : tensor<1x4x25x5xf32>) -> tensor<1x4x25x5xf32>
  return %c : tensor<1x4x25x5xf32>
}

// -----

// A quantized ResNet stem's max pool, on int8: the window kernel with vectors as wide in bytes
// as the f32 ones (64 lanes; this 10-column row takes a 16-lane block), -128 (the type's least
// value) as the pad and the start, the padded copy folded (the kernel reads the 9x20 source),
// signed maxima.
// CHECK-LABEL: func.func @max_pool_int8
// CHECK: arith.constant -128 : i8
// CHECK: vector.transfer_read %{{.*}} : tensor<1x2x9x20xi8>, vector<32xi8>
// CHECK: arith.maxsi {{.*}} : vector<16xi8>
// CHECK-NOT: arith.maximumf
// CHECK: } {etc.cpu.path = "window"
func.func @max_pool_int8(%x: tensor<1x2x9x20xi8>) -> tensor<1x2x5x10xi8> {
  %least = arith.constant -128 : i8
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %least : i8
  } : tensor<1x2x9x20xi8> to tensor<1x2x11x22xi8>
  %e = tensor.empty() : tensor<1x2x5x10xi8>
  %init = linalg.fill ins(%least : i8) outs(%e : tensor<1x2x5x10xi8>) -> tensor<1x2x5x10xi8>
  %k = tensor.empty() : tensor<3x3xi8>
  %r = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%padded, %k : tensor<1x2x11x22xi8>, tensor<3x3xi8>) outs(%init : tensor<1x2x5x10xi8>) -> tensor<1x2x5x10xi8>
  return %r : tensor<1x2x5x10xi8>
}
