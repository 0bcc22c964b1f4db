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
func.func @strided_unit_dims(%a: memref<1x4x1x8xf32, strided<[64, 16, 16, 1]>>, %out: memref<1x4x1x8xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%a : memref<1x4x1x8xf32, strided<[64, 16, 16, 1]>>) outs(%out : memref<1x4x1x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  return
}
