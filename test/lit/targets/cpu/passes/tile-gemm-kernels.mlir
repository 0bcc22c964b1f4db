// RUN: etc-opt %s --split-input-file --etc-cpu-gemm-kernels="kc=128 kc-strided=128" --etc-cpu-fuse-elementwise --etc-cpu-gemm-regions="kc=128 kc-strided=128" --etc-cpu-tile-gemm-kernels="kc=128 kc-strided=128" | filecheck %s

// One K block (96 <= 1.5 kc): each 6x64 tile starts from the broadcast bias in registers,
// accumulates the whole K as six 64-wide vector FMAs per k step, takes its ReLU in registers and
// is stored once. Column panels are the loop threads share; the partial row block (4 of 6) is
// peeled.
// CHECK-LABEL: func.func @one_block
// CHECK-NOT: call @etc_gemm
// CHECK: scf.for %[[J:.*]] = %c0 to %c128 step %c64
// CHECK: scf.for
// CHECK: vector.transfer_read %arg2[%[[J]]]
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK-COUNT-6: vector.fma {{.*}} : vector<64xf32>
// CHECK: arith.maximumf {{.*}} : vector<6x64xf32>
// CHECK: vector.transfer_write
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<4x64xf32>)
// CHECK: arith.maximumf {{.*}} : vector<4x64xf32>
// CHECK: } {etc.thread_split}
// CHECK-NOT: linalg.generic {
// CHECK-NOT: func.func private
#mn = affine_map<(m, n) -> (m, n)>
#n = affine_map<(m, n) -> (n)>
func.func @one_block(%a: tensor<64x96xf32>, %b: tensor<96x128xf32>, %bias: tensor<128xf32>) -> tensor<64x128xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %c = linalg.broadcast ins(%bias : tensor<128xf32>) outs(%e : tensor<64x128xf32>) dimensions = [0]
  %r = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x128xf32>) outs(%c : tensor<64x128xf32>) -> tensor<64x128xf32>
  %y = linalg.generic {indexing_maps = [#mn, #mn], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<64x128xf32>
  return %y : tensor<64x128xf32>
}

// -----

// K = 512 in blocks of 128 (the 128 x 64 block of B stays in L1 across the row blocks): per
// column panel, the init is a row loop, the K blocks accumulate the panel's tiles in memory, and
// the epilogue is a row loop over the panel after the last block.
// CHECK-LABEL: func.func @k_blocks
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %c0 to %c48 step %c6
// CHECK: scf.for %{{.*}} = %c0 to %c512 step %c128
// CHECK: scf.for %{{.*}} = %c0 to %c48 step %c6
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK-COUNT-6: vector.fma {{.*}} : vector<64xf32>
// CHECK: scf.for %{{.*}} = %c0 to %c48 step %c6
// CHECK: arith.maximumf {{.*}} : vector<6x64xf32>
// CHECK: } {etc.thread_split}
// CHECK-NOT: linalg.generic {
func.func @k_blocks(%a: tensor<48x512xf32>, %b: tensor<512x128xf32>) -> tensor<48x128xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<48x128xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<48x128xf32>) -> tensor<48x128xf32>
  %r = linalg.matmul ins(%a, %b : tensor<48x512xf32>, tensor<512x128xf32>) outs(%c : tensor<48x128xf32>) -> tensor<48x128xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<48x128xf32>) outs(%e : tensor<48x128xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<48x128xf32>
  return %y : tensor<48x128xf32>
}

// -----

// A constant integer power in the epilogue (GPT-2's GELU: x^3) becomes products before the
// epilogue is vectorized (LLVM's powi takes only a scalar exponent).
// CHECK-LABEL: func.func @power_epilogue
// CHECK-NOT: math.fpowi
// CHECK: arith.mulf {{.*}} : vector<6x64xf32>
func.func @power_epilogue(%a: tensor<12x64xf32>, %b: tensor<64x64xf32>) -> tensor<12x64xf32> {
  %z = arith.constant 0.0 : f32
  %three = arith.constant 3 : i64
  %e = tensor.empty() : tensor<12x64xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<12x64xf32>) -> tensor<12x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<12x64xf32>, tensor<64x64xf32>) outs(%c : tensor<12x64xf32>) -> tensor<12x64xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m, n)>], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<12x64xf32>) outs(%e : tensor<12x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %p = math.fpowi %x, %three : f32, i64
    linalg.yield %p : f32
  } -> tensor<12x64xf32>
  return %y : tensor<12x64xf32>
}

// -----

// K in blocks and no consumer: the blocks accumulate in the result itself after a fill pass of
// its own (no whole-size accumulator, no identity epilogue copying each panel).
// CHECK-LABEL: func.func @k_blocks_plain
// CHECK-NOT: bufferization.alloc_tensor
// CHECK: linalg.yield %cst : f32
// CHECK: scf.for %{{.*}} = %c0 to %c512 step %c128
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK: } {etc.thread_split}
// CHECK-NEXT: tensor.collapse_shape
// CHECK-NEXT: return
func.func @k_blocks_plain(%a: tensor<48x512xf32>, %b: tensor<512x128xf32>) -> tensor<48x128xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<48x128xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<48x128xf32>) -> tensor<48x128xf32>
  %r = linalg.matmul ins(%a, %b : tensor<48x512xf32>, tensor<512x128xf32>) outs(%c : tensor<48x128xf32>) -> tensor<48x128xf32>
  return %r : tensor<48x128xf32>
}

// -----

// B read in place is never padded: its 70 columns are a 64-wide panel and a peeled 6-wide one,
// both static through the K-block loops (K = 300 in blocks of 150), the init and the epilogue.
// CHECK-LABEL: func.func @partial_panel
// CHECK-NOT: tensor.pad
// CHECK: scf.for %{{.*}} = %c0 to %c300 step %c150
// CHECK: iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK: arith.maximumf {{.*}} : vector<6x64xf32>
// CHECK: scf.for %{{.*}} = %c0 to %c300 step %c150
// CHECK: iter_args(%{{.*}} = %{{.*}}) -> (vector<6x6xf32>)
// CHECK: arith.maximumf {{.*}} : vector<6x6xf32>
// CHECK-NOT: linalg.generic {
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @partial_panel(%a: tensor<13x300xf32>, %b: tensor<300x70xf32>, %bias: tensor<70xf32>) -> tensor<13x70xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<13x70xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<13x70xf32>) -> tensor<13x70xf32>
  %r = linalg.matmul ins(%a, %b : tensor<13x300xf32>, tensor<300x70xf32>) outs(%c : tensor<13x70xf32>) -> tensor<13x70xf32>
  %o = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%r, %bias : tensor<13x70xf32>, tensor<70xf32>) outs(%e : tensor<13x70xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %s = arith.addf %x, %y : f32
    %m = arith.maximumf %s, %z : f32
    linalg.yield %m : f32
  } -> tensor<13x70xf32>
  return %o : tensor<13x70xf32>
}

// -----

// A partial panel wider than one register and not a power of two (120 columns: 64 + 56) is split
// into 16-lane pieces, each accumulated in registers over the whole K: a vector<6x56xf32> carried
// around the K loop is an illegal LLVM type that is spilled and rebuilt element by element. (K = 60
// is not whole vectors: the last 8 columns are not dot products, see @leftover_columns.)
// CHECK-LABEL: func.func @partial_panel_split
// CHECK: iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK-COUNT-3: iter_args(%{{.*}} = %{{.*}}) -> (vector<6x16xf32>)
// CHECK: iter_args(%{{.*}} = %{{.*}}) -> (vector<6x8xf32>)
// CHECK-NOT: vector<6x56xf32>) {
// CHECK: arith.maximumf {{.*}} : vector<6x56xf32>
// CHECK-NOT: linalg.generic {
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @partial_panel_split(%a: tensor<12x60xf32>, %b: tensor<60x120xf32>) -> tensor<12x120xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x120xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<12x120xf32>) -> tensor<12x120xf32>
  %r = linalg.matmul ins(%a, %b : tensor<12x60xf32>, tensor<60x120xf32>) outs(%c : tensor<12x120xf32>) -> tensor<12x120xf32>
  %o = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<12x120xf32>) outs(%e : tensor<12x120xf32>) {
  ^bb0(%x: f32, %out: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<12x120xf32>
  return %o : tensor<12x120xf32>
}


// -----

// The last columns of a B read in place, fewer than half a vector past whole ones (68 = 64 + 4),
// are dot products along K: 4 rows of A and the 4 columns transposed, one 16-lane vector of each
// per K step, 16 FMAs into 16 accumulators, each summed across its lanes; their epilogue is the
// consumer's body too, over the 12 x 4 leftover tile.
// CHECK-LABEL: func.func @leftover_columns
// CHECK: iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK-NOT: vector<6x4xf32>
// CHECK: linalg.transpose ins(%{{.*}} : tensor<64x4xf32>)
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<1x12x4xf32>)
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>,
// CHECK-COUNT-16: vector.fma {{.*}} : vector<16xf32>
// CHECK: } {etc.thread_split}
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x12x4xf32>) attrs = {{.*}}etc.etc_gemm_{{.*}}_epi_leftover
// CHECK: arith.maximumf {{.*}} : f32
// CHECK: tensor.insert_slice {{.*}}[0, 0, 64] [1, 12, 4] [1, 1, 1] : tensor<1x12x4xf32> into tensor<1x12x68xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @leftover_columns(%a: tensor<12x64xf32>, %b: tensor<64x68xf32>) -> tensor<12x68xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x68xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<12x68xf32>) -> tensor<12x68xf32>
  %r = linalg.matmul ins(%a, %b : tensor<12x64xf32>, tensor<64x68xf32>) outs(%c : tensor<12x68xf32>) -> tensor<12x68xf32>
  %o = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<12x68xf32>) outs(%e : tensor<12x68xf32>) {
  ^bb0(%x: f32, %out: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<12x68xf32>
  return %o : tensor<12x68xf32>
}

// -----

// Dynamic rows: whole blocks of 6 rows accumulate a 6x64 tile in registers; the partial block
// (to the run-time row count) is peeled and runs one row at a time, a 1x64 tile (static shapes
// that vectorize like the full ones).
// CHECK-LABEL: func.func @dynamic_rows
// CHECK: scf.for %{{.*}} = %c0 to %c128 step %c64
// CHECK: %[[FULL:.*]] = affine.apply
// CHECK: scf.for %{{.*}} = %c0 to %[[FULL]] step %c6
// CHECK: scf.for {{.*}} -> (vector<6x64xf32>)
// CHECK-COUNT-6: vector.fma {{.*}} : vector<64xf32>
// CHECK: scf.for %{{.*}} = %[[FULL]] to %{{.*}} step %c6
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c1
// CHECK: scf.for {{.*}} -> (vector<1x64xf32>)
// CHECK: vector.fma {{.*}} : vector<64xf32>
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

// A 3x3 convolution (K = 72 over 8x16 pixels, the residual add its epilogue): inside each column
// panel the im2col is gathered first into a [72, 64] panel buffer, one row per k step; with
// stride 1 a row is masked contiguous loads of the input (one per input row its 64 columns span,
// 16 + 2 padding wide: shifts 0, 2, 4, 6), merged; the row blocks then read the buffer.
// CHECK-LABEL: func.func @conv_panels
// CHECK-NOT: vector.gather
// CHECK: scf.for %[[J:.*]] = %c0 to %c128 step %c64
// CHECK-NEXT: %[[BUF:.*]] = tensor.empty() : tensor<1x72x64xf32>
// CHECK-NEXT: %[[COL:.*]] = scf.for %[[K:.*]] = %c0 to %c72 step %c1 iter_args(%[[ACC:.*]] = %[[BUF]])
// CHECK-COUNT-4: vector.transfer_read %{{.*}}[%c0, %{{.*}}], %{{.*}}, %{{.*}} {in_bounds = [true]} : tensor<1x1440xf32>, vector<64xf32>
// CHECK: vector.transfer_write %{{.*}}, %[[ACC]][%c0, %[[K]], %c0]
// CHECK: scf.for {{.*}} -> (vector<6x64xf32>)
// CHECK: vector.transfer_read %[[COL]][%c0, %{{.*}}, %c0]
// CHECK-COUNT-6: vector.fma {{.*}} : vector<64xf32>
// CHECK: arith.addf {{.*}} : vector<6x64xf32>
// CHECK: } {etc.thread_split}
// CHECK-NOT: tensor<1x72x128xf32>
func.func @conv_panels(%x: tensor<1x8x10x18xf32>, %w: tensor<32x8x3x3xf32>, %r: tensor<1x32x8x16xf32>) -> tensor<1x32x8x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x32x8x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x32x8x16xf32>) -> tensor<1x32x8x16xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x8x10x18xf32>, tensor<32x8x3x3xf32>) outs(%f : tensor<1x32x8x16xf32>) -> tensor<1x32x8x16xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c, d)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c, %r : tensor<1x32x8x16xf32>, tensor<1x32x8x16xf32>) outs(%e : tensor<1x32x8x16xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    linalg.yield %s : f32
  } -> tensor<1x32x8x16xf32>
  return %y : tensor<1x32x8x16xf32>
}

// -----

// Stride 2 along the width: a panel row's columns are 2 apart in the input. Per distinct shift
// (the 64 columns fall in 4 output rows of 16), 128 contiguous inputs bounded by the image's end
// and one permute keeping the even ones, merged by the shifts' masks: no gather.
// CHECK-LABEL: func.func @conv_stride2
// CHECK: scf.for %{{.*}} = %c0 to %c128 step %c64
// CHECK-NEXT: tensor.empty() : tensor<1x72x64xf32>
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c72 step %c1
// CHECK-NOT: vector.gather
// CHECK: %[[W:.*]] = vector.transfer_read {{.*}} : tensor<1x4488xf32>, vector<128xf32>
// CHECK-NEXT: vector.shuffle %[[W]], %{{.*}} [0, 2, 4, 6, {{.*}}, 122, 124, 126] : vector<128xf32>, vector<128xf32>
// CHECK-COUNT-3: arith.select %{{.*}} : vector<64xi1>, vector<64xf32>
// CHECK-NOT: vector.gather
// CHECK: } {etc.thread_split}
func.func @conv_stride2(%x: tensor<1x8x17x33xf32>, %w: tensor<32x8x3x3xf32>) -> tensor<1x32x8x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x32x8x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x32x8x16xf32>) -> tensor<1x32x8x16xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%x, %w : tensor<1x8x17x33xf32>, tensor<32x8x3x3xf32>) outs(%f : tensor<1x32x8x16xf32>) -> tensor<1x32x8x16xf32>
  return %c : tensor<1x32x8x16xf32>
}
