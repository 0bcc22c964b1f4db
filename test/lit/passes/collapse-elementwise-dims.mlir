// RUN: etc-opt %s --split-input-file --etc-collapse-elementwise-dims | filecheck %s

// Elementwise over identical layouts: one loop.
// CHECK-LABEL: func.func @relu6
// CHECK: %[[X:.*]] = tensor.collapse_shape %arg0 {{\[}}[0, 1, 2, 3]] : tensor<1x64x16x16xf32> into tensor<16384xf32>
// CHECK: %[[E:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1, 2, 3]] : tensor<1x64x16x16xf32> into tensor<16384xf32>
// CHECK: %[[R:.*]] = linalg.generic {indexing_maps = [#[[ID:.*]], #[[SCALAR:.*]], #[[ID]]], iterator_types = ["parallel"]} ins(%[[X]], %{{.*}} : tensor<16384xf32>, tensor<f32>) outs(%[[E]] : tensor<16384xf32>)
// CHECK: arith.minimumf
// CHECK: tensor.expand_shape %[[R]] {{\[}}[0, 1, 2, 3]] output_shape [1, 64, 16, 16] : tensor<16384xf32> into tensor<1x64x16x16xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
func.func @relu6(%x: tensor<1x64x16x16xf32>, %six: tensor<f32>) -> tensor<1x64x16x16xf32> {
  %e = tensor.empty() : tensor<1x64x16x16xf32>
  %r = linalg.generic {indexing_maps = [#id, #scalar, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %six : tensor<1x64x16x16xf32>, tensor<f32>) outs(%e : tensor<1x64x16x16xf32>) {
  ^bb0(%in: f32, %s: f32, %out: f32):
    %m = arith.minimumf %in, %s : f32
    linalg.yield %m : f32
  } -> tensor<1x64x16x16xf32>
  return %r : tensor<1x64x16x16xf32>
}

// -----

// A per-channel bias keeps the channel loop apart; the pixel loops merge.
// CHECK-DAG: #[[PIX:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[CH:.*]] = affine_map<(d0, d1, d2) -> (d1)>
// CHECK-LABEL: func.func @bias
// CHECK: tensor.collapse_shape %arg0 {{\[}}[0], [1], [2, 3]] : tensor<2x8x5x7xf32> into tensor<2x8x35xf32>
// CHECK: linalg.generic {indexing_maps = [#[[PIX]], #[[CH]], #[[PIX]]], iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0], [1], [2, 3]] output_shape [2, 8, 5, 7]
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d1)>
func.func @bias(%x: tensor<2x8x5x7xf32>, %b: tensor<8xf32>) -> tensor<2x8x5x7xf32> {
  %e = tensor.empty() : tensor<2x8x5x7xf32>
  %r = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %b : tensor<2x8x5x7xf32>, tensor<8xf32>) outs(%e : tensor<2x8x5x7xf32>) {
  ^bb0(%in: f32, %c: f32, %out: f32):
    %a = arith.addf %in, %c : f32
    linalg.yield %a : f32
  } -> tensor<2x8x5x7xf32>
  return %r : tensor<2x8x5x7xf32>
}

// -----

// Nothing to merge: a transpose of the two loops, a reduction, a dynamic shape.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: collapse_shape
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT: expand_shape
#t = affine_map<(d0, d1) -> (d1, d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @untouched(%x: tensor<4x6xf32>, %d: tensor<?x6xf32>, %acc: tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>, tensor<?x6xf32>) {
  %e = tensor.empty() : tensor<6x4xf32>
  %t = linalg.generic {indexing_maps = [#t, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x6xf32>) outs(%e : tensor<6x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<6x4xf32>
  %s = linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x6xf32>) outs(%acc : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<4xf32>
  %n = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%d : tensor<?x6xf32>) outs(%d : tensor<?x6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %in : f32
    linalg.yield %a : f32
  } -> tensor<?x6xf32>
  return %t, %s, %n : tensor<6x4xf32>, tensor<4xf32>, tensor<?x6xf32>
}

// -----

// The body reads its loop indices: merging loops would change what linalg.index means.
// CHECK-LABEL: func.func @indexed
// CHECK-NOT: collapse_shape
// CHECK: linalg.index 1
#id3 = affine_map<(d0, d1) -> (d0, d1)>
func.func @indexed(%x: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %e = tensor.empty() : tensor<4x6xf32>
  %r = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x6xf32>) outs(%e : tensor<4x6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %i = linalg.index 1 : index
    %c = arith.index_cast %i : index to i64
    %f = arith.sitofp %c : i64 to f32
    %a = arith.addf %in, %f : f32
    linalg.yield %a : f32
  } -> tensor<4x6xf32>
  return %r : tensor<4x6xf32>
}

// -----

// After bufferization: views of the buffers, written in place, nothing expanded back.
// A subview keeps its strided layout; a group that is not contiguous in it is not merged.
// CHECK-LABEL: func.func @buffers
// CHECK: %[[IN:.*]] = memref.collapse_shape %arg0 {{\[}}[0, 1, 2]] : memref<2x4x8xf32> into memref<64xf32>
// CHECK: %[[OUT:.*]] = memref.collapse_shape %arg1 {{\[}}[0, 1, 2]] : memref<2x4x8xf32> into memref<64xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel"]} ins(%[[IN]] : memref<64xf32>) outs(%[[OUT]] : memref<64xf32>)
// CHECK: memref.collapse_shape %{{.*}} {{\[}}[0, 1, 2]] : memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>> into memref<32xf32, strided<[1], offset: 32>>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel"]}
// CHECK: memref.collapse_shape %{{.*}} {{\[}}[0, 1], [2]] : memref<1x4x8xf32, strided<[128, 16, 1]>> into memref<4x8xf32, strided<[16, 1]>>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]}
// CHECK-NOT: expand_shape
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @buffers(%x: memref<2x4x8xf32>, %y: memref<2x4x8xf32>, %big: memref<2x8x16xf32>) {
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<2x4x8xf32>) outs(%y : memref<2x4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  }
  %half = memref.subview %y[1, 0, 0] [1, 4, 8] [1, 1, 1] : memref<2x4x8xf32> to memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>
  %row = memref.subview %big[0, 0, 0] [1, 4, 8] [1, 1, 1] : memref<2x8x16xf32> to memref<1x4x8xf32, strided<[128, 16, 1]>>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%half : memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>) outs(%half : memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  }
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%row : memref<1x4x8xf32, strided<[128, 16, 1]>>) outs(%row : memref<1x4x8xf32, strided<[128, 16, 1]>>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  }
  return
}

// -----

// In place on memrefs (bufferization writes an elementwise op into a buffer it reads): the buffer
// read and written is one view, so the loop reads and writes through one pointer (two views of it
// would be two pointers LLVM cannot prove apart: its vector loop then never runs).
// CHECK-LABEL: func.func @in_place
// CHECK: %[[A:.*]] = memref.collapse_shape %arg0 {{\[}}[0, 1, 2, 3]] : memref<1x8x4x4xi8> into memref<128xi8>
// CHECK: %[[B:.*]] = memref.collapse_shape %arg1 {{\[}}[0, 1, 2, 3]] : memref<1x8x4x4xi8> into memref<128xi8>
// CHECK-NOT: memref.collapse_shape
// CHECK: linalg.generic {{.*}} ins(%[[A]], %[[B]] : memref<128xi8>, memref<128xi8>) outs(%[[B]] : memref<128xi8>)
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @in_place(%a: memref<1x8x4x4xi8>, %b: memref<1x8x4x4xi8>) {
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%a, %b : memref<1x8x4x4xi8>, memref<1x8x4x4xi8>) outs(%b : memref<1x8x4x4xi8>) {
  ^bb0(%x: i8, %y: i8, %o: i8):
    %s = arith.addi %x, %y : i8
    linalg.yield %s : i8
  }
  return
}
