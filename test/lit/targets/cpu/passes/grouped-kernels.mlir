// RUN: etc-opt %s --split-input-file --etc-cpu-grouped-kernels | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-grouped-kernels="lanes=8 channels=4 accumulators=4" | filecheck %s --check-prefix=SMALL

// A grouped 3x3/2 convolution (2 groups of 8 channels) with its bias and ReLU, as torch-mlir and
// etc-cpu-fuse-elementwise give it: the padded input, filter and bias broadcast as 5-D views, the
// ReLU a 5-D generic on the op's result. One kernel: a loop over the batch, then over the 2
// channel blocks (one group's 8 channels each), then output rows two at a time: the 10-wide
// output row is one masked 16-lane vector, so a block is 8 channels x 2 rows and every weight
// feeds two FMAs. The bias scalars start the 16 accumulators; a loop over the group's 8 input
// channels loads each tap's 32 inputs once per row (input rows 2*oh and 2*oh + 2), keeps the even
// lanes and multiplies them into all 8 channels. ReLU runs on each accumulator before its
// store; the collapse stays a view.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "convolution", op = "linalg.conv_2d_ngchw_gfchw", path = "grouped"
// CHECK-SAME: {kind = "epilogue", op = "linalg.generic", path = "fused"
// CHECK-LABEL: func.func @grouped3x3s2_relu
// CHECK-NOT: linalg.conv_2d_ngchw_gfchw
// CHECK: scf.for %[[N:.*]] = %c0 to %c1 step %c1
// CHECK: scf.for %[[B:.*]] = %c0 to %c2 step %c1
// CHECK: %[[G:.*]] = arith.divui %[[B]], %c1 : index
// CHECK-COUNT-8: tensor.extract %{{.*}}[%[[G]], %{{.*}}] : tensor<2x8xf32>
// CHECK: scf.for %[[OH:.*]] = %c0 to %c10 step %c2
// CHECK: %[[IH0:.*]] = arith.muli %[[OH]], %c2 : index
// CHECK: %[[OH1:.*]] = arith.addi %[[OH]], %c1 : index
// CHECK: %{{.*}}:16 = scf.for %[[CI:.*]] = %c0 to %c8 step %c1 iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK: %[[IH2:.*]] = arith.addi %[[IH0]], %c2 : index
// CHECK: %[[X:.*]] = vector.transfer_read %padded[%[[N]], %[[G]], %[[CI]], %[[IH0]], %{{.*}}], %{{.*}} : tensor<1x2x8x22x22xf32>, vector<32xf32>
// CHECK: vector.shuffle %[[X]], %[[X]] [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
// CHECK: %[[X1:.*]] = vector.transfer_read %padded[%[[N]], %[[G]], %[[CI]], %[[IH2]], %{{.*}}], %{{.*}} : tensor<1x2x8x22x22xf32>, vector<32xf32>
// CHECK: vector.shuffle %[[X1]], %[[X1]] [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
// CHECK-COUNT-16: math.fma
// CHECK: scf.yield
// CHECK: arith.cmpf ugt, %{{.*}} : vector<16xf32>
// CHECK: arith.select
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%[[N]], %[[G]], %{{.*}}, %[[OH]], %c0] : vector<16xf32>, tensor<1x2x8x10x10xf32>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%[[N]], %[[G]], %{{.*}}, %[[OH1]], %c0] : vector<16xf32>, tensor<1x2x8x10x10xf32>
// CHECK: {etc.thread_split}
// CHECK: tensor.collapse_shape
// SMALL-LABEL: func.func @grouped3x3s2_relu
// SMALL: scf.for %{{.*}} = %c0 to %c4 step %c1
// SMALL: %{{.*}}:4 = scf.for
// SMALL-COUNT-4: math.fma %{{.*}} : vector<8xf32>
#map = affine_map<(d0, d1, d2, d3, d4) -> (d1, d2)>
#map1 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
module {
  func.func @grouped3x3s2_relu(%arg0: tensor<1x16x20x20xf32> {bufferization.writable = false, etc.cpu.arg = "input:0"}, %arg1: tensor<16x8x3x3xf32> {bufferization.writable = false, etc.cpu.arg = "constant:0.weight"}, %arg2: tensor<16xf32> {bufferization.writable = false, etc.cpu.arg = "constant:0.bias"}) -> tensor<1x16x10x10xf32> attributes {etc.cpu.result_bounds = [array<i64: 1, 16, 10, 10>]} {
    %cst = arith.constant 0.000000e+00 : f32
    %expanded = tensor.expand_shape %arg0 [[0], [1, 2], [3], [4]] output_shape [1, 2, 8, 20, 20] : tensor<1x16x20x20xf32> into tensor<1x2x8x20x20xf32>
    %expanded_0 = tensor.expand_shape %arg2 [[0, 1]] output_shape [2, 8] : tensor<16xf32> into tensor<2x8xf32>
    %0 = tensor.empty() : tensor<1x2x8x10x10xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%expanded_0 : tensor<2x8xf32>) outs(%0 : tensor<1x2x8x10x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<1x2x8x10x10xf32>
    %padded = tensor.pad %expanded low[0, 0, 0, 1, 1] high[0, 0, 0, 1, 1] {
    ^bb0(%arg3: index, %arg4: index, %arg5: index, %arg6: index, %arg7: index):
      tensor.yield %cst : f32
    } : tensor<1x2x8x20x20xf32> to tensor<1x2x8x22x22xf32>
    %expanded_1 = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [2, 8, 8, 3, 3] : tensor<16x8x3x3xf32> into tensor<2x8x8x3x3xf32>
    %2 = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%padded, %expanded_1 : tensor<1x2x8x22x22xf32>, tensor<2x8x8x3x3xf32>) outs(%1 : tensor<1x2x8x10x10xf32>) -> tensor<1x2x8x10x10xf32>
    %3 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<1x2x8x10x10xf32>) outs(%0 : tensor<1x2x8x10x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      %4 = arith.cmpf ugt, %in, %cst : f32
      %5 = arith.select %4, %in, %cst : f32
      linalg.yield %5 : f32
    } -> tensor<1x2x8x10x10xf32>
    %collapsed = tensor.collapse_shape %3 [[0], [1, 2], [3], [4]] : tensor<1x2x8x10x10xf32> into tensor<1x16x10x10xf32>
    return %collapsed : tensor<1x16x10x10xf32>
  }
}


// -----

// Not f32: left to the default loops, the reason recorded.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "convolution", op = "linalg.conv_2d_ngchw_gfchw", path = "loops", reason = "not static f32 tensors"
// CHECK-LABEL: func.func @grouped_f64
// CHECK: linalg.conv_2d_ngchw_gfchw
func.func @grouped_f64(%x: tensor<1x2x4x6x6xf64>, %w: tensor<2x4x4x3x3xf64>, %init: tensor<1x2x4x4x4xf64>) -> tensor<1x2x4x4x4xf64> {
  %0 = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x4x6x6xf64>, tensor<2x4x4x3x3xf64>) outs(%init : tensor<1x2x4x4x4xf64>) -> tensor<1x2x4x4x4xf64>
  return %0 : tensor<1x2x4x4x4xf64>
}
