// RUN: etc-opt %s --etc-collapse-elementwise-dims | filecheck %s

// A unit dim's stride says nothing about its neighbours: in memref<1x4x1x8, strides [64, 16, 16, 1]>
// dims 1 and 3 are 16 apart, not 8, so (d1, d2, d3) must not become one 32-element loop (the
// collapse_shape would be invalid). Only what is really contiguous merges.
// CHECK-LABEL: func.func @strided_unit_dims
// CHECK-NOT: memref.collapse_shape {{.*}} {{\[\[}}0, 1, 2, 3]]
// CHECK-NOT: memref.collapse_shape {{.*}} {{\[\[}}0], [1, 2, 3]]
// CHECK: linalg.generic
// CHECK: return
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @strided_unit_dims(%a: memref<1x4x1x8xf32, strided<[64, 16, 16, 1]>>, %out: memref<1x4x1x8xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%a : memref<1x4x1x8xf32, strided<[64, 16, 16, 1]>>) outs(%out : memref<1x4x1x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  return
}

// A group of unit dims only (a [1, 1, 1] slice of a [4, 16]-strided buffer): the collapsed stride is
// the group's first dim's, as memref.collapse_shape's verifier computes it (16 here, not 1: the
// cpu pipeline's next verification failed, "expected collapsed type to be memref<1xf32,
// strided<[16], offset: ?>>"; found by the compiler fuzzer, an index_put with two threads).
// CHECK-LABEL: func.func @all_unit_group
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1, 2]] : memref<1x1x1xf32, strided<[16, 1, 1], offset: ?>> into memref<1xf32, strided<[16], offset: ?>>
// CHECK: linalg.generic
func.func @all_unit_group(%a: memref<1x1x1xf32, strided<[16, 1, 1], offset: ?>>, %out: memref<1x1x1xf32>) {
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%a : memref<1x1x1xf32, strided<[16, 1, 1], offset: ?>>) outs(%out : memref<1x1x1xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  return
}
