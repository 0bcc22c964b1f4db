// RUN: etc-opt %s --split-input-file --etc-cpu-attention-kernels="min-keys=32" | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-attention-kernels | filecheck %s --check-prefix=SMALL

// Attention as torch-mlir lowers sdpa with an additive mask (2 heads, 37 queries and keys, head
// dim 16): QK^T, + mask[37, 37] broadcast over the heads, softmax (max with its unused argmax,
// x - max, exp, sum, divide), times V. With min-keys=32 it is one flash kernel: a loop over the
// heads (split across threads) carrying the output, each head making a block's buffers (its own
// on each thread: its scores [37, 48]: the 37 keys padded to whole vectors, its accumulators, its
// running max and sum); per key tile
// (here one, the 37 keys, the last 5 masked to -inf) the scores as a register-tiled GEMM (6 rows x
// 3 vectors, FMA over the head dim) with the mask added as each vector is stored, then per row the
// max (its lanes combined by halving), the exp (marked: its argument is never positive) and sum, then the accumulators updated by broadcast probabilities times V rows. Nothing
// [37, 37] is left. Below min-keys (the default 256) the three ops stay, a decision with its reason.
// CHECK: etc.cpu.decisions = [{kind = "attention", op = "linalg.batch_matmul", path = "flash"{{.*}}}]
// CHECK-LABEL: func.func @attention
// CHECK-NOT: tensor<2x37x37xf32>
// CHECK: scf.for %[[BH:.*]] = %{{.*}} to %{{.*}} step {{.*}} -> (tensor<2x37x16xf32>) {
// CHECK-NEXT: tensor.empty() : tensor<37x48xf32>
// CHECK-NEXT: tensor.empty() : tensor<37x16xf32>
// CHECK-NEXT: tensor.empty() : tensor<2x37xf32>
// CHECK: vector.transfer_read %{{.*}}[%[[BH]], %{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<2x16x37xf32>, vector<16xf32>
// CHECK: vector.fma
// CHECK: vector.transfer_read %{{.*}} : tensor<37x37xf32>, vector<16xf32>
// CHECK: vector.constant_mask [5] : vector<16xi1>
// CHECK: vector.transfer_write %{{.*}} : vector<16xf32>, tensor<37x48xf32>
// CHECK: vector.extract_strided_slice {{.*}} {offsets = [8], sizes = [8], strides = [1]}
// CHECK: arith.maxnumf %{{.*}} : vector<8xf32>
// CHECK: math.exp %{{.*}} {etc.nonpositive} : vector<16xf32>
// CHECK: arith.addf %{{.*}} : vector<8xf32>
// CHECK: tensor.extract %{{.*}} : tensor<37x48xf32>
// CHECK: vector.fma
// CHECK: vector.transfer_write %{{.*}} : vector<16xf32>, tensor<2x37x16xf32>
// CHECK: } {etc.thread_split}
// CHECK-NOT: linalg.batch_matmul
// SMALL: etc.cpu.decisions = [{kind = "attention", op = "linalg.batch_matmul", path = "three-op", reason = "37 keys < min-keys=256: the scores stay in cache"{{.*}}}]
// SMALL-COUNT-2: linalg.batch_matmul
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#mask = affine_map<(d0, d1, d2) -> (d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
#row1 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
func.func @attention(%q: tensor<2x37x16xf32>, %kt: tensor<2x16x37xf32>, %v: tensor<2x37x16xf32>, %m: tensor<37x37xf32>) -> tensor<2x37x16xf32> {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<2x37x37xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x37x37xf32>) -> tensor<2x37x37xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<2x37x16xf32>, tensor<2x16x37xf32>) outs(%z : tensor<2x37x37xf32>) -> tensor<2x37x37xf32>
  %x = linalg.generic {indexing_maps = [#id, #mask, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s, %m : tensor<2x37x37xf32>, tensor<37x37xf32>) outs(%e : tensor<2x37x37xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x37x37xf32>
  %ei = tensor.empty() : tensor<2x37xi64>
  %zi = linalg.fill ins(%c0 : i64) outs(%ei : tensor<2x37xi64>) -> tensor<2x37xi64>
  %em = tensor.empty() : tensor<2x37xf32>
  %mi = linalg.fill ins(%ninf : f32) outs(%em : tensor<2x37xf32>) -> tensor<2x37xf32>
  %max:2 = linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x37x37xf32>) outs(%mi, %zi : tensor<2x37xf32>, tensor<2x37xi64>) {
  ^bb0(%a: f32, %o: f32, %oi: i64):
    %i = linalg.index 2 : index
    %ii = arith.index_cast %i : index to i64
    %mx = arith.maximumf %a, %o : f32
    %gt = arith.cmpf ogt, %a, %o : f32
    %sel = arith.select %gt, %ii, %oi : i64
    linalg.yield %mx, %sel : f32, i64
  } -> (tensor<2x37xf32>, tensor<2x37xi64>)
  %mx1 = tensor.expand_shape %max#0 [[0], [1, 2]] output_shape [2, 37, 1] : tensor<2x37xf32> into tensor<2x37x1xf32>
  %d = linalg.generic {indexing_maps = [#id, #row1, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %mx1 : tensor<2x37x37xf32>, tensor<2x37x1xf32>) outs(%e : tensor<2x37x37xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x37x37xf32>
  %ex = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d : tensor<2x37x37xf32>) outs(%e : tensor<2x37x37xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<2x37x37xf32>
  %es = tensor.empty() : tensor<2x37x1xf32>
  %zs = linalg.fill ins(%zero : f32) outs(%es : tensor<2x37x1xf32>) -> tensor<2x37x1xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ex : tensor<2x37x37xf32>) outs(%zs : tensor<2x37x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<2x37x1xf32>
  %p = linalg.generic {indexing_maps = [#id, #row1, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ex, %sum : tensor<2x37x37xf32>, tensor<2x37x1xf32>) outs(%e : tensor<2x37x37xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x37x37xf32>
  %eo = tensor.empty() : tensor<2x37x16xf32>
  %zo = linalg.fill ins(%zero : f32) outs(%eo : tensor<2x37x16xf32>) -> tensor<2x37x16xf32>
  %out = linalg.batch_matmul ins(%p, %v : tensor<2x37x37xf32>, tensor<2x37x16xf32>) outs(%zo : tensor<2x37x16xf32>) -> tensor<2x37x16xf32>
  return %out : tensor<2x37x16xf32>
}
