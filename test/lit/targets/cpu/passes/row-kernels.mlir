// RUN: etc-opt %s --split-input-file --etc-cpu-row-kernels | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-row-kernels="lanes=8 unroll=2" | filecheck %s --check-prefix=AVX2

// Softmax as torch-mlir lowers it (max, x - max, exp, sum, divide) over rows of 101: one loop nest
// over the rows (the outer one split across threads); pass 0 the max (four 16-lane accumulators,
// compare-and-select with their NaN lanes tracked aside, then the masked last vector of 5 lanes),
// halved down to one lane, pass 1 the sum of exp(x - max) stored into the
// output's row (the exp marked etc.nonpositive: x - max(x) never is, so etc-cpu-expand-math takes
// its short form), pass 2 that row times 1/sum (a reciprocal per row, no divide per element).
// CHECK: etc.cpu.decisions = [{kind = "reduction", op = "linalg.generic", path = "row-reduction"{{.*}}}, {kind = "reduction", op = "linalg.generic", path = "row-reduction"
// CHECK-LABEL: func.func @softmax
// CHECK-NOT: linalg.generic
// CHECK: scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK: iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xi1>, vector<16xi1>, vector<16xi1>, vector<16xi1>) {
// CHECK: vector.transfer_read {{.*}}[%[[R]], %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<6x101xf32>, vector<16xf32>
// CHECK: arith.cmpf ogt
// CHECK: arith.select
// CHECK: arith.cmpf uno
// CHECK: vector.constant_mask [5] : vector<16xi1>
// CHECK: vector.extract_strided_slice {{.*}} {offsets = [8], sizes = [8], strides = [1]}
// CHECK: vector.reduction <or>
// CHECK: math.exp %{{.*}} {etc.nonpositive} : vector<16xf32>
// CHECK: arith.addf
// CHECK: vector.transfer_write
// CHECK: arith.divf %{{.*}}, %{{.*}} : f32
// CHECK-NOT: math.exp
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%{{.*}}, %c96] : vector<16xf32>, tensor<6x101xf32>
// CHECK: } {etc.thread_split}
// AVX2-LABEL: func.func @softmax
// AVX2: vector.transfer_read {{.*}} : tensor<6x101xf32>, vector<8xf32>
// AVX2: vector.constant_mask [5] : vector<8xi1>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0, 0)>
#red = affine_map<(d0, d1) -> (d0)>
func.func @softmax(%x: tensor<6x101xf32>) -> tensor<6x101xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<6xf32>
  %m0 = linalg.fill ins(%ninf : f32) outs(%e0 : tensor<6xf32>) -> tensor<6xf32>
  %m = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<6x101xf32>) outs(%m0 : tensor<6xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maximumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<6xf32>
  %mx = tensor.expand_shape %m [[0, 1]] output_shape [6, 1] : tensor<6xf32> into tensor<6x1xf32>
  %e1 = tensor.empty() : tensor<6x101xf32>
  %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %mx : tensor<6x101xf32>, tensor<6x1xf32>) outs(%e1 : tensor<6x101xf32>) {
  ^bb0(%in: f32, %mm: f32, %o: f32):
    %d = arith.subf %in, %mm : f32
    %v = math.exp %d : f32
    linalg.yield %v : f32
  } -> tensor<6x101xf32>
  %e2 = tensor.empty() : tensor<6x1xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<6x1xf32>) -> tensor<6x1xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%ex : tensor<6x101xf32>) outs(%s0 : tensor<6x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<6x1xf32>
  %out = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%ex, %s : tensor<6x101xf32>, tensor<6x1xf32>) outs(%e1 : tensor<6x101xf32>) {
  ^bb0(%in: f32, %ss: f32, %o: f32):
    %v = arith.divf %in, %ss : f32
    linalg.yield %v : f32
  } -> tensor<6x101xf32>
  return %out : tensor<6x101xf32>
}

// -----

// A row sum whose input is read transposed is not a row of contiguous memory, and an arg-max
// reads loop indices: the default loops, with the reason (and `etc.cpu.decided`, so
// etc-cpu-default-loops does not decide again); a column sum is etc-cpu-default-loops' to decide.
// CHECK: etc.cpu.decisions = [{kind = "reduction", op = "linalg.generic", path = "loops", reason = "an operand is read transposed"{{.*}}}, {kind = "reduction", op = "linalg.generic", path = "loops", reason = "its body reads loop indices (an arg-reduction or a gather)"{{.*}}}]
// CHECK-LABEL: func.func @not_rows
// CHECK: linalg.generic {{.*}}etc.cpu.decided
// CHECK: linalg.index
// CHECK: linalg.generic
// CHECK-NOT: etc.cpu.decided
// CHECK: linalg.yield
#t = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @not_rows(%x: tensor<8x16xf32>) -> (tensor<16xf32>, tensor<8xi64>, tensor<8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %s = linalg.generic {indexing_maps = [#t, #red], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x16xf32>) outs(%z : tensor<16xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %ei = tensor.empty() : tensor<8xi64>
  %zi = arith.constant 0 : i64
  %ci = linalg.fill ins(%zi : i64) outs(%ei : tensor<8xi64>) -> tensor<8xi64>
  %arg = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x16xf32>) outs(%ci : tensor<8xi64>) {
  ^bb0(%in: f32, %best: i64):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %pos = arith.cmpf ogt, %in, %zero : f32
    %r = arith.select %pos, %ji, %best : i64
    linalg.yield %r : i64
  } -> tensor<8xi64>
  %ec = tensor.empty() : tensor<8xf32>
  %zc = linalg.fill ins(%zero : f32) outs(%ec : tensor<8xf32>) -> tensor<8xf32>
  %c = linalg.generic {indexing_maps = [#t, #col], iterator_types = ["reduction", "parallel"]} ins(%x : tensor<8x16xf32>) outs(%zc : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %s, %arg, %c : tensor<16xf32>, tensor<8xi64>, tensor<8xf32>
}
