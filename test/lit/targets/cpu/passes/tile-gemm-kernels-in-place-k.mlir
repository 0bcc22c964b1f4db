// RUN: etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-cpu-gemm-kernels{kc=2048 kc-strided=128}, etc-cpu-fuse-elementwise, etc-cpu-gemm-regions{kc=2048 kc-strided=128}, etc-cpu-tile-gemm-kernels{kc=2048 kc-strided=128})' | filecheck %s

// The K block of a B read in place (gemm.in_place_k_block), as x86's kc = 2048: rows 4 KiB apart
// (N = 1024) alias in the cache, so K = 1024 is cut into blocks of 256 (256 rows x 4 KiB: half
// the L2), accumulated in memory between the blocks.
// CHECK-LABEL: func.func @aliasing_rows
// CHECK: bufferization.alloc_tensor
// CHECK: scf.for %{{.*}} = %c0 to %c1024 step %c64
// CHECK: scf.for %{{.*}} = %c0 to %c1024 step %c256
// CHECK: scf.for %{{.*}} = %c0 to %c256 step %c1 iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK: } {etc.thread_split}
func.func @aliasing_rows(%a: tensor<12x1024xf32>, %b: tensor<1024x1024xf32>, %bias: tensor<1024xf32>) -> tensor<12x1024xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x1024xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<12x1024xf32>) -> tensor<12x1024xf32>
  %r = linalg.matmul ins(%a, %b : tensor<12x1024xf32>, tensor<1024x1024xf32>) outs(%c : tensor<12x1024xf32>) -> tensor<12x1024xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%r, %bias : tensor<12x1024xf32>, tensor<1024xf32>) outs(%e : tensor<12x1024xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<12x1024xf32>
  return %o : tensor<12x1024xf32>
}

// -----

// Rows 4000 bytes apart do not alias: the whole K = 1000 accumulates in registers, the bias
// added to the accumulator (no whole-size buffer, no K-block loop).
// CHECK-LABEL: func.func @whole_k
// CHECK-NOT: bufferization.alloc_tensor
// CHECK: scf.for %{{.*}} = %c0 to %c960 step %c64
// CHECK-NOT: step %c125
// CHECK: scf.for %{{.*}} = %c0 to %c1000 step %c1 iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
// CHECK: } {etc.thread_split}
func.func @whole_k(%a: tensor<12x1000xf32>, %b: tensor<1000x1000xf32>, %bias: tensor<1000xf32>) -> tensor<12x1000xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x1000xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<12x1000xf32>) -> tensor<12x1000xf32>
  %r = linalg.matmul ins(%a, %b : tensor<12x1000xf32>, tensor<1000x1000xf32>) outs(%c : tensor<12x1000xf32>) -> tensor<12x1000xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%r, %bias : tensor<12x1000xf32>, tensor<1000xf32>) outs(%e : tensor<12x1000xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<12x1000xf32>
  return %o : tensor<12x1000xf32>
}

// -----

// Rows 8000 bytes apart do not alias, but 1600 of them span 12.8 MB of B, a page each: blocks of
// 400 (a divisor of K up to 6 MiB of B per block).
// CHECK-LABEL: func.func @long_reach
// CHECK: scf.for %{{.*}} = %c0 to %c1984 step %c64
// CHECK: scf.for %{{.*}} = %c0 to %c1600 step %c400
// CHECK: scf.for %{{.*}} = %c0 to %c400 step %c1 iter_args(%{{.*}} = %{{.*}}) -> (vector<6x64xf32>)
func.func @long_reach(%a: tensor<6x1600xf32>, %b: tensor<1600x2000xf32>) -> tensor<6x2000xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6x2000xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<6x2000xf32>) -> tensor<6x2000xf32>
  %r = linalg.matmul ins(%a, %b : tensor<6x1600xf32>, tensor<1600x2000xf32>) outs(%c : tensor<6x2000xf32>) -> tensor<6x2000xf32>
  return %r : tensor<6x2000xf32>
}
