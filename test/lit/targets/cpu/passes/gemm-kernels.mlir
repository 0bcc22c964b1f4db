// RUN: etc-opt %s --split-input-file --etc-cpu-gemm-kernels | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-gemm-kernels="lanes=1" | filecheck %s --check-prefix=SCALAR

// A contraction becomes a call to its kernel, a private declaration fusion cannot enter (the
// kernel is defined by etc-cpu-gemm-regions); the call carries the contraction's geometry; the
// decision is on the module, with how B (an activation) is read (gemm_match.blocking).
// CHECK: module attributes {etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "gemm", reason = "B read in place (fewer than 16 row blocks to share a panel copy)", where = "{{.*}}gemm-kernels.mlir:{{[0-9]+}}:{{[0-9]+}}"}]}
// CHECK-LABEL: func.func @mm
// CHECK-NOT: linalg.matmul
// CHECK: %[[R:.*]] = call @[[KERNEL:etc_gemm_m[0-9]+]](%arg0, %arg1, %{{.*}}) {etc.cpu.gemm = {K = 96 : i64, M = 64 : i64, N = 128 : i64, a_batched = false, b_batched = false, b_layout = "kn", batch = 1 : i64, transposed = false}}
// CHECK: return %[[R]]
// CHECK: func.func private @[[KERNEL]](tensor<64x96xf32>, tensor<96x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
// SCALAR: {kind = "contraction", op = "linalg.generic", path = "loops", reason = "the target has no vector unit the GEMM kernel is written for"
// SCALAR-NOT: vector.fma
func.func @mm(%a: tensor<64x96xf32>, %b: tensor<96x128xf32>) -> tensor<64x128xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x128xf32>) outs(%c : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}

// -----

// Too small to pay for packing, a single output row (a GEMV), and a producer fused into the
// contraction's body: each stays as it is, with the reason on the module.
// CHECK: path = "small", reason = "4096 flops, below the 65536 that pay for packing"
// CHECK: path = "gemv", reason = "1 row(s) of output times an activation: a matrix-vector product, memory bound"
// CHECK: path = "loops", reason = "its body is more than a multiply-add (fused producer or epilogue)"
// CHECK-LABEL: func.func @not_taken
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT: vector.fma
#mk = affine_map<(m, n, k) -> (m, k)>
#kn = affine_map<(m, n, k) -> (k, n)>
#mn = affine_map<(m, n, k) -> (m, n)>
func.func @not_taken(%a: tensor<8x16xf32>, %b: tensor<16x16xf32>, %v: tensor<1x288xf32>, %w: tensor<288x512xf32>) -> (tensor<8x16xf32>, tensor<1x512xf32>, tensor<8x16xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %small = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  %e1 = tensor.empty() : tensor<1x512xf32>
  %c1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<1x512xf32>) -> tensor<1x512xf32>
  %gemv = linalg.matmul ins(%v, %w : tensor<1x288xf32>, tensor<288x512xf32>) outs(%c1 : tensor<1x512xf32>) -> tensor<1x512xf32>
  %fused = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<8x16xf32>, tensor<16x16xf32>) outs(%c : tensor<8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %s = math.rsqrt %x : f32
    %m = arith.mulf %s, %y : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<8x16xf32>
  return %small, %gemv, %fused : tensor<8x16xf32>, tensor<1x512xf32>, tensor<8x16xf32>
}

// -----

// A convolution becomes a kernel call too (filter x im2col, its geometry on the call); the
// kernel's own contraction is not a second decision.
// CHECK: module attributes {etc.cpu.decisions = [{kind = "convolution", op = "linalg.conv_2d_nchw_fchw", path = "gemm", where = "{{[^"]*}}"}]}
// CHECK-LABEL: func.func @conv
// CHECK-NOT: linalg.conv_2d_nchw_fchw
// CHECK: call @etc_gemm_c{{[0-9]+}}(%arg1, %arg0, %{{.*}}) {etc.cpu.gemm = {K = 144 : i64, M = 32 : i64, N = 64 : i64, {{.*}}b_layout = "im2col", batch = 1 : i64, conv = {c = 16 : i64, {{.*}}kh = 3 : i64, kw = 3 : i64{{.*}}}, transposed = false}}
// CHECK: func.func private @etc_gemm_c
func.func @conv(%x: tensor<1x16x10x10xf32>, %w: tensor<32x16x3x3xf32>) -> tensor<1x32x8x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x32x8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x16x10x10xf32>, tensor<32x16x3x3xf32>) outs(%f : tensor<1x32x8x8xf32>) -> tensor<1x32x8x8xf32>
  return %c : tensor<1x32x8x8xf32>
}

// -----

// One row times a transposed activation (a GEMV, left as loops: %w is not labelled a
// constant here) reads W[n, k] in place instead of through the transpose torch-mlir put in
// front of it: the default loops then keep k innermost, a contiguous dot product per output.
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[W:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK: path = "gemv"
// CHECK-LABEL: func.func @decode
// CHECK-SAME: (%[[X:.*]]: tensor<1x288xf32>, %[[WEIGHT:.*]]: tensor<32000x288xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[A]], #[[W]], #{{.*}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[X]], %[[WEIGHT]] : tensor<1x288xf32>, tensor<32000x288xf32>)
#t_in = affine_map<(n, k) -> (n, k)>
#t_out = affine_map<(n, k) -> (k, n)>
func.func @decode(%x: tensor<1x288xf32>, %w: tensor<32000x288xf32>) -> tensor<1x32000xf32> {
  %z = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<288x32000xf32>
  %wt = linalg.generic {indexing_maps = [#t_in, #t_out], iterator_types = ["parallel", "parallel"]} ins(%w : tensor<32000x288xf32>) outs(%et : tensor<288x32000xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<288x32000xf32>
  %e = tensor.empty() : tensor<1x32000xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<1x32000xf32>) -> tensor<1x32000xf32>
  %r = linalg.matmul ins(%x, %wt : tensor<1x288xf32>, tensor<288x32000xf32>) outs(%c : tensor<1x32000xf32>) -> tensor<1x32000xf32>
  return %r : tensor<1x32000xf32>
}

// -----

// The same one-token Linear through a weight (an entry argument labelled constant) is the GEMM
// kernel: the weight is packed into panels when the blob is built and streamed once.
// CHECK: path = "gemm"
// CHECK-LABEL: func.func @decode_weight
// CHECK: call @etc_gemm_m{{[0-9]+}}(%arg0, %arg1, %{{.*}}) {etc.cpu.gemm = {K = 288 : i64, M = 1 : i64, N = 32000 : i64, {{.*}}b_layout = "nk"
#t_in = affine_map<(n, k) -> (n, k)>
#t_out = affine_map<(n, k) -> (k, n)>
func.func @decode_weight(%x: tensor<1x288xf32>, %w: tensor<32000x288xf32> {etc.cpu.arg = "constant:head"}) -> tensor<1x32000xf32> {
  %z = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<288x32000xf32>
  %wt = linalg.generic {indexing_maps = [#t_in, #t_out], iterator_types = ["parallel", "parallel"]} ins(%w : tensor<32000x288xf32>) outs(%et : tensor<288x32000xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<288x32000xf32>
  %e = tensor.empty() : tensor<1x32000xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<1x32000xf32>) -> tensor<1x32000xf32>
  %r = linalg.matmul ins(%x, %wt : tensor<1x288xf32>, tensor<288x32000xf32>) outs(%c : tensor<1x32000xf32>) -> tensor<1x32000xf32>
  return %r : tensor<1x32000xf32>
}

// -----

// Dynamic rows (a prompt of up to 128 tokens): the kernel is compiled for the rows' upper bound
// (M, from the input's etc.dim_bounds) and takes the actual rows from A.
// CHECK-LABEL: func.func @dynamic_rows
// CHECK: call @[[KERNEL:etc_gemm_m[0-9]+]](%arg0, %arg1, %{{.*}}) {etc.cpu.gemm = {K = 96 : i64, M = 128 : i64, N = 128 : i64, a_batched = false, b_batched = false, b_layout = "kn", batch = 1 : i64, dynamic_rows = true, transposed = false}}
// CHECK: func.func private @[[KERNEL]](tensor<?x96xf32>, tensor<96x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
func.func @dynamic_rows(%a: tensor<?x96xf32> {etc.dim_bounds = array<i64: 1, 128, 96, 96>}, %b: tensor<96x128xf32>) -> tensor<?x128xf32> {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x96xf32>
  %e = tensor.empty(%m) : tensor<?x128xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<?x128xf32>) -> tensor<?x128xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x96xf32>, tensor<96x128xf32>) outs(%c : tensor<?x128xf32>) -> tensor<?x128xf32>
  return %r : tensor<?x128xf32>
}

// -----

// Rows without a bound cannot be planned: plain loops, with the reason.
// CHECK: path = "loops", reason = "dynamic rows without an upper bound"
// CHECK-LABEL: func.func @unbounded_rows
func.func @unbounded_rows(%a: tensor<?x96xf32>, %b: tensor<96x128xf32>) -> tensor<?x128xf32> {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x96xf32>
  %e = tensor.empty(%m) : tensor<?x128xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<?x128xf32>) -> tensor<?x128xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x96xf32>, tensor<96x128xf32>) outs(%c : tensor<?x128xf32>) -> tensor<?x128xf32>
  return %r : tensor<?x128xf32>
}
