// The cpu target's back end is one pipeline string from the edge dialect: the registered passes in
// order (the first ones onto torch-mlir's torch dialect, then its pipelines to linalg), sizes from
// the ISA table (AVX2 here: 8 lanes, a 6x16 GEMM tile), then upstream lowering to the LLVM
// dialect. etc-opt runs it, or any prefix of it; `--from linalg` starts at its linalg stage.
// RUN: %PYTHON -m etc.targets.cpu.pipeline --target x86-64-v3 | filecheck %s --check-prefix=PIPELINE
// RUN: %PYTHON -m etc.targets.cpu.pipeline --target x86-64-v3 --threads 2 | filecheck %s --check-prefix=THREADS
// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-cpu-gemm-kernels{lanes=8 mr=6 nr=16 kc=256}, etc-cpu-fuse-elementwise, etc-cpu-gemm-regions{lanes=8 mr=6 nr=16 kc=256}, etc-cpu-tile-gemm-kernels{lanes=8 mr=6 nr=16 kc=256})' | filecheck %s --check-prefix=ROOTS
// RUN: %PYTHON -m etc.targets.cpu.pipeline --target x86-64-v3 --from linalg | filecheck %s --check-prefix=LINALG
// RUN: %PYTHON -m etc.targets.cpu.pipeline --target x86-64-v3 --from linalg --run %s | filecheck %s

// PIPELINE: builtin.module(etc-cpu-conv1d-as-2d, etc-cpu-drop-padding-taps, etc-cpu-winograd-convs{min-channels=16 min-tiles=16}, etc-cpu-edge-to-torch, etc-cpu-lower-quantized, etc-cpu-lower-resize, etc-cpu-expand-torch-ops, symbol-dce, torchdynamo-export-to-torch-backend-pipeline, torch-backend-to-linalg-on-tensors-backend-pipeline, etc-cpu-int8-kernels{dot=avx2-madd mr=4 panels=1}, etc-cpu-attention-kernels{lanes=8 registers=16}, etc-cpu-gemm-kernels{lanes=8 mr=6 nr=16 kc=2048 kc-strided=256 l2-kib=2048}, etc-cpu-resize-kernels{lanes=8}, etc-cpu-fuse-elementwise, etc-cpu-gemm-regions{lanes=8 mr=6 nr=16 kc=2048 kc-strided=256 l2-kib=2048}, etc-cpu-tile-gemm-kernels{lanes=8 mr=6 nr=16 kc=2048 kc-strided=256 l2-kib=2048}, etc-cpu-window-kernels{lanes=8 plane-epilogue=true}, etc-cpu-grouped-kernels{lanes=8}, etc-cpu-row-kernels{lanes=8}, etc-cpu-widen-bf16, etc-cpu-expand-math{reciprocal-estimates=false}, etc-cpu-prepack-constants, etc-cpu-block-transposes, etc-cpu-default-loops, etc-cpu-distinct-inits, one-shot-bufferize{{.*}}, etc-cpu-distinct-results, buffer-results-to-out-params{{.*}}, canonicalize, cse, etc-cpu-dynamic-shapes, etc-cpu-forward-result-copies, etc-collapse-elementwise-dims, etc-cpu-plan-scratch{alignment=64}, etc-cpu-entry-abi, etc-cpu-copies-to-linalg, etc-cpu-drop-assertions, etc-cpu-prefetch-gemm-tiles{f32-tiles=false}, etc-cpu-gemm-epilogue-rows{min-ops=12}, func.func(convert-linalg-to-loops), etc-cpu-outline-regions, {{.*}}convert-vector-to-llvm{{.*}}convert-func-to-llvm{index-bitwidth=64 use-bare-ptr-memref-call-conv=1}
// THREADS: etc-cpu-drop-assertions, etc-cpu-prefetch-gemm-tiles{f32-tiles=false}, etc-cpu-gemm-epilogue-rows{min-ops=12}, etc-cpu-split-threads{threads=2}, etc-cpu-outline-regions, lower-affine
// LINALG: builtin.module(etc-cpu-int8-kernels{dot=avx2-madd mr=4 panels=1}, etc-cpu-attention-kernels{lanes=8 registers=16}, etc-cpu-gemm-kernels

// The norm in front of the head's contraction is NOT fused into it: the GEMM kernel is built
// first (vector FMAs on 16 lanes), fusion then merges only the norm's own elementwise ops.
// ROOTS: path = "gemm"
// ROOTS: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// ROOTS: math.rsqrt
// ROOTS: vector.fma {{.*}} : vector<16xf32>

// The head (a weight) is packed into contiguous 16-wide column panels when the blob is built.
// CHECK: module attributes {etc.cpu.abi = [{dtype = "float32", kind = "input", name = "0", shape = array<i64: 32, 288>}, {dtype = "float32", kind = "constant", name = "w", shape = array<i64: 288>}, {dtype = "float32", kind = "constant", name = "head#packed0", pack = "func.func @pack(%arg0: tensor<288x512xf32>) -> tensor<32x288x16xf32> {{.*}}", shape = array<i64: 32, 288, 16>}, {dtype = "float32", kind = "output", name = "0", shape = array<i64: 32, 512>}, {dtype = "uint8", kind = "scratch"
// CHECK-SAME: etc.cpu.decisions = [{kind = "contraction", op = "linalg.generic", path = "gemm"{{.*}}}, {kind = "reduction", op = "linalg.generic", path = "row-reduction"
// CHECK: llvm.func @head
// CHECK: llvm.intr.fmuladd{{.*}}vector<16xf32>
#x = affine_map<(t, c) -> (t, c)>
#c = affine_map<(t, c) -> (c)>
#t = affine_map<(t, c) -> (t)>
#tn = affine_map<(t, n, k) -> (t, k)>
#kn = affine_map<(t, n, k) -> (k, n)>
#out = affine_map<(t, n, k) -> (t, n)>
func.func @head(%x: tensor<32x288xf32> {etc.cpu.arg = "input:0", bufferization.writable = false},
                %w: tensor<288xf32> {etc.cpu.arg = "constant:w", bufferization.writable = false},
                %head: tensor<288x512xf32> {etc.cpu.arg = "constant:head", bufferization.writable = false}) -> tensor<32x512xf32> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 288.0 : f32
  %eps = arith.constant 1.0e-5 : f32
  %e0 = tensor.empty() : tensor<32xf32>
  %z0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<32xf32>) -> tensor<32xf32>
  %ss = linalg.generic {indexing_maps = [#x, #t], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<32x288xf32>) outs(%z0 : tensor<32xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %sq = arith.mulf %a, %a : f32
    %s = arith.addf %sq, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  %e1 = tensor.empty() : tensor<32x288xf32>
  %normed = linalg.generic {indexing_maps = [#x, #t, #c, #x], iterator_types = ["parallel", "parallel"]} ins(%x, %ss, %w : tensor<32x288xf32>, tensor<32xf32>, tensor<288xf32>) outs(%e1 : tensor<32x288xf32>) {
  ^bb0(%a: f32, %s: f32, %g: f32, %o: f32):
    %mean = arith.divf %s, %n : f32
    %v = arith.addf %mean, %eps : f32
    %r = math.rsqrt %v : f32
    %y = arith.mulf %a, %r : f32
    %yg = arith.mulf %y, %g : f32
    linalg.yield %yg : f32
  } -> tensor<32x288xf32>
  %e2 = tensor.empty() : tensor<32x512xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32x512xf32>) -> tensor<32x512xf32>
  %logits = linalg.matmul ins(%normed, %head : tensor<32x288xf32>, tensor<288x512xf32>) outs(%z2 : tensor<32x512xf32>) -> tensor<32x512xf32>
  return %logits : tensor<32x512xf32>
}
