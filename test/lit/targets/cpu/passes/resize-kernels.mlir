// etc-cpu-resize-kernels: each etc.cpu.resize generic (etc-cpu-lower-resize's, as it leaves
// torch-mlir's pipeline) -> a vector kernel along the output row, or a `loops` decision with the
// reason. Inputs: what the cpu pipeline gives this pass (the edge ops of the comments, lowered).
// RUN: etc-opt %s --split-input-file --etc-cpu-resize-kernels=lanes=8 | filecheck %s

// upsample_bilinear2d 3x20 -> 3x14 (align_corners=False), 8 lanes: a loop over n, channels (split
// between threads) and output rows; per row its input rows and weights from tables; two static
// blocks of 8 output columns, each reading two vectors of both input rows (columns 0-15, then
// 11-26, the last masked past the row's 20), blended vertically, then the taps shuffled out of the
// pair and blended with constant weights; the 6-wide last block's store masked.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "resize", op = "linalg.generic", path = "resize"
// CHECK-LABEL: func.func @forward
// CHECK-NOT: linalg.generic
// CHECK: %[[WX0:.*]] = arith.constant dense<[0.785714268, {{.*}}]> : vector<8xf32>
// CHECK: scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step
// CHECK: scf.for %[[C:.*]] = %{{.*}} to %{{.*}} step
// CHECK: scf.for %[[OY:.*]] = %{{.*}} to %c3 step
// CHECK: %[[Y0:.*]] = tensor.extract %{{.*}}[%[[OY]]] : tensor<3xindex>
// CHECK: %[[Y1:.*]] = tensor.extract %{{.*}}[%[[OY]]] : tensor<3xindex>
// CHECK: %[[A:.*]] = vector.broadcast %{{.*}} : f32 to vector<8xf32>
// CHECK: %[[B:.*]] = vector.broadcast %{{.*}} : f32 to vector<8xf32>
// CHECK: %[[T0:.*]] = vector.transfer_read %arg0[%[[N]], %[[C]], %[[Y0]], %{{.*}}], %{{.*}} {in_bounds = [true]}
// CHECK: %[[T1:.*]] = vector.transfer_read %arg0[%[[N]], %[[C]], %[[Y1]], %{{.*}}], %{{.*}} {in_bounds = [true]}
// CHECK: %[[M:.*]] = arith.mulf %[[T0]], %[[A]] : vector<8xf32>
// CHECK: %[[LO:.*]] = math.fma %[[T1]], %[[B]], %[[M]] : vector<8xf32>
// CHECK: %[[HI:.*]] = math.fma
// CHECK: %[[S0:.*]] = vector.shuffle %[[LO]], %[[HI]] [0, 1, 3, 4, 5, 7, 8, 10]
// CHECK: %[[S1:.*]] = vector.shuffle %[[LO]], %[[HI]] [1, 2, 4, 5, 6, 8, 9, 11]
// CHECK: %[[L:.*]] = arith.mulf %[[S0]], %[[WX0]]
// CHECK: %[[V:.*]] = math.fma %[[S1]], %{{.*}}, %[[L]]
// CHECK: vector.transfer_write %[[V]], %{{.*}}[%[[N]], %[[C]], %[[OY]], %{{.*}}] {in_bounds = [true]}
// CHECK: vector.transfer_read %arg0[%[[N]], %[[C]], %[[Y0]], %c19], %{{.*}} : tensor<1x1x3x20xf32>, vector<8xf32>
// CHECK: vector.shuffle {{.*}} [0, 2, 3, 4, 6, 7, 0, 0]
// CHECK: vector.transfer_write {{.*}} : vector<8xf32>, tensor<1x1x3x14xf32>
// CHECK: } {etc.thread_split}
// CHECK: {etc.cpu.resize_kernel = "bilinear 3x20 -> 3x14, 1 planes, 2 column blocks of 8 (2 reading two vectors)"}

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @forward(%arg0: tensor<1x1x3x20xf32> {bufferization.writable = false, etc.cpu.arg = "input:0"}) -> tensor<1x1x3x14xf32> attributes {etc.cpu.result_bounds = [array<i64: 1, 1, 3, 14>]} {
    %cst = arith.constant dense<[0, 1, 2]> : tensor<3xindex>
    %cst_0 = arith.constant dense<[1, 2, 2]> : tensor<3xindex>
    %cst_1 = arith.constant dense<[0, 1, 3, 4, 5, 7, 8, 10, 11, 13, 14, 15, 17, 18]> : tensor<14xindex>
    %cst_2 = arith.constant dense<[1, 2, 4, 5, 6, 8, 9, 11, 12, 14, 15, 16, 18, 19]> : tensor<14xindex>
    %cst_3 = arith.constant dense<[0.785714268, 0.357142925, 0.928571224, 5.000000e-01, 0.0714282989, 0.642857074, 0.214285851, 0.785714149, 0.357142448, 0.928570747, 5.000000e-01, 0.0714282989, 0.642856597, 0.214284897]> : tensor<14xf32>
    %cst_4 = arith.constant dense<[0.214285731, 0.642857074, 0.0714287758, 5.000000e-01, 0.928571701, 0.357142925, 0.785714149, 0.214285851, 0.642857552, 0.0714292526, 5.000000e-01, 0.928571701, 0.357143402, 0.785715103]> : tensor<14xf32>
    %c0 = arith.constant 0 : index
    %cst_5 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x1x3x14xf32>
    %1 = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%0 : tensor<1x1x3x14xf32>) attrs =  {etc.cpu.resize = {col_weights0 = array<f32: 0.785714268, 0.357142925, 0.928571224, 5.000000e-01, 0.0714282989, 0.642857074, 0.214285851, 0.785714149, 0.357142448, 0.928570747, 5.000000e-01, 0.0714282989, 0.642856597, 0.214284897>, col_weights1 = array<f32: 0.214285731, 0.642857074, 0.0714287758, 5.000000e-01, 0.928571701, 0.357142925, 0.785714149, 0.214285851, 0.642857552, 0.0714292526, 5.000000e-01, 0.928571701, 0.357143402, 0.785715103>, cols0 = array<i64: 0, 1, 3, 4, 5, 7, 8, 10, 11, 13, 14, 15, 17, 18>, cols1 = array<i64: 1, 2, 4, 5, 6, 8, 9, 11, 12, 14, 15, 16, 18, 19>, row_weights0 = array<f32: 1.000000e+00, 1.000000e+00, 1.000000e+00>, row_weights1 = array<f32: 0.000000e+00, 0.000000e+00, 0.000000e+00>, rows0 = array<i64: 0, 1, 2>, rows1 = array<i64: 1, 2, 2>}} {
    ^bb0(%out: f32):
      %2 = linalg.index 2 : index
      %3 = linalg.index 3 : index
      %extracted = tensor.extract %cst[%2] : tensor<3xindex>
      %extracted_6 = tensor.extract %cst_0[%2] : tensor<3xindex>
      %extracted_7 = tensor.extract %cst_1[%3] : tensor<14xindex>
      %extracted_8 = tensor.extract %cst_2[%3] : tensor<14xindex>
      %extracted_9 = tensor.extract %cst_3[%3] : tensor<14xf32>
      %extracted_10 = tensor.extract %cst_4[%3] : tensor<14xf32>
      %extracted_11 = tensor.extract %arg0[%c0, %c0, %extracted, %extracted_7] : tensor<1x1x3x20xf32>
      %extracted_12 = tensor.extract %arg0[%c0, %c0, %extracted, %extracted_8] : tensor<1x1x3x20xf32>
      %extracted_13 = tensor.extract %arg0[%c0, %c0, %extracted_6, %extracted_7] : tensor<1x1x3x20xf32>
      %extracted_14 = tensor.extract %arg0[%c0, %c0, %extracted_6, %extracted_8] : tensor<1x1x3x20xf32>
      %4 = arith.mulf %extracted_9, %extracted_11 : f32
      %5 = arith.mulf %extracted_10, %extracted_12 : f32
      %6 = arith.addf %4, %5 : f32
      %7 = arith.mulf %extracted_9, %extracted_13 : f32
      %8 = arith.mulf %extracted_10, %extracted_14 : f32
      %9 = arith.addf %7, %8 : f32
      %10 = arith.mulf %9, %cst_5 : f32
      %11 = arith.addf %6, %10 : f32
      linalg.yield %11 : f32
    } -> tensor<1x1x3x14xf32>
    return %1 : tensor<1x1x3x14xf32>
  }
}

// -----

// 2x40 -> 2x5: the 5 output columns read 34 input columns, more than two vectors of 8: loops, with
// the reason, and the generic stays as it is.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "resize", op = "linalg.generic", path = "loops", reason = "5 output columns read 34 input columns (more than two vectors: downscaling by more than 2x)"
// CHECK: linalg.generic {{.*}} attrs = {etc.cpu.resize
// CHECK-NOT: vector.shuffle

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @forward(%arg0: tensor<1x1x2x40xf32> {bufferization.writable = false, etc.cpu.arg = "input:0"}) -> tensor<1x1x2x5xf32> attributes {etc.cpu.result_bounds = [array<i64: 1, 1, 2, 5>]} {
    %cst = arith.constant dense<[0, 1]> : tensor<2xindex>
    %cst_0 = arith.constant dense<[3, 11, 19, 27, 35]> : tensor<5xindex>
    %cst_1 = arith.constant dense<[4, 12, 20, 28, 36]> : tensor<5xindex>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cst_2 = arith.constant 0.000000e+00 : f32
    %cst_3 = arith.constant 5.000000e-01 : f32
    %0 = tensor.empty() : tensor<1x1x2x5xf32>
    %1 = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%0 : tensor<1x1x2x5xf32>) attrs =  {etc.cpu.resize = {col_weights0 = array<f32: 5.000000e-01, 5.000000e-01, 5.000000e-01, 5.000000e-01, 5.000000e-01>, col_weights1 = array<f32: 5.000000e-01, 5.000000e-01, 5.000000e-01, 5.000000e-01, 5.000000e-01>, cols0 = array<i64: 3, 11, 19, 27, 35>, cols1 = array<i64: 4, 12, 20, 28, 36>, row_weights0 = array<f32: 1.000000e+00, 1.000000e+00>, row_weights1 = array<f32: 0.000000e+00, 0.000000e+00>, rows0 = array<i64: 0, 1>, rows1 = array<i64: 1, 1>}} {
    ^bb0(%out: f32):
      %2 = linalg.index 2 : index
      %3 = linalg.index 3 : index
      %extracted = tensor.extract %cst[%2] : tensor<2xindex>
      %extracted_4 = tensor.extract %cst_0[%3] : tensor<5xindex>
      %extracted_5 = tensor.extract %cst_1[%3] : tensor<5xindex>
      %extracted_6 = tensor.extract %arg0[%c0, %c0, %extracted, %extracted_4] : tensor<1x1x2x40xf32>
      %extracted_7 = tensor.extract %arg0[%c0, %c0, %extracted, %extracted_5] : tensor<1x1x2x40xf32>
      %extracted_8 = tensor.extract %arg0[%c0, %c0, %c1, %extracted_4] : tensor<1x1x2x40xf32>
      %extracted_9 = tensor.extract %arg0[%c0, %c0, %c1, %extracted_5] : tensor<1x1x2x40xf32>
      %4 = arith.mulf %extracted_6, %cst_3 : f32
      %5 = arith.mulf %extracted_7, %cst_3 : f32
      %6 = arith.addf %4, %5 : f32
      %7 = arith.mulf %extracted_8, %cst_3 : f32
      %8 = arith.mulf %extracted_9, %cst_3 : f32
      %9 = arith.addf %7, %8 : f32
      %10 = arith.mulf %9, %cst_2 : f32
      %11 = arith.addf %6, %10 : f32
      linalg.yield %11 : f32
    } -> tensor<1x1x2x5xf32>
    return %1 : tensor<1x1x2x5xf32>
  }
}
