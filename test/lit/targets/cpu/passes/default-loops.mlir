// RUN: etc-opt %s --etc-cpu-default-loops | filecheck %s

// Named ops left over are generalized; a matmul's reduction moves outside its unit-stride
// output column (i, j, k -> i, k, j) and is not reassociated; a row sum keeps its reduction
// innermost (marked reassoc), and is plain loops here: row reductions are etc-cpu-row-kernels'
// (which runs before this pass in the pipeline); an arg-max reads loop indices: plain loops,
// with that reason.
// CHECK-DAG: #[[MK:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[KN:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK: etc.cpu.decisions = [{kind = "reduction", op = "linalg.generic", path = "loops", reason = "a row reduction etc-cpu-row-kernels did not take (a target without a vector unit, or not in the entry's body)", where = "{{.*}}default-loops.mlir:{{[0-9]+}}:{{[0-9]+}}"}, {kind = "reduction", op = "linalg.generic", path = "loops", reason = "its body reads loop indices (an arg-reduction or a gather)"
// CHECK-LABEL: func.func @loops
// CHECK: linalg.generic {indexing_maps = [#[[MK]], #[[KN]], #{{.*}}], iterator_types = ["parallel", "reduction", "parallel"]}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.addf %{{.*}}, %{{.*}} fastmath<reassoc,contract> : f32
// CHECK: linalg.index 1
#id = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
func.func @loops(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) -> (tensor<8x32xf32>, tensor<8xf32>, tensor<8xi64>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x32xf32>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %c1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x16xf32>) outs(%c1 : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8xi64>
  %zi = arith.constant 0 : i64
  %c2 = linalg.fill ins(%zi : i64) outs(%e2 : tensor<8xi64>) -> tensor<8xi64>
  %arg = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x16xf32>) outs(%c2 : tensor<8xi64>) {
  ^bb0(%x: f32, %best: i64):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %pos = arith.cmpf ogt, %x, %z : f32
    %r = arith.select %pos, %ji, %best : i64
    linalg.yield %r : i64
  } -> tensor<8xi64>
  return %mm, %sum, %arg : tensor<8x32xf32>, tensor<8xf32>, tensor<8xi64>
}
