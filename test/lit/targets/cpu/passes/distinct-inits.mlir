// RUN: etc-opt %s --split-input-file --etc-cpu-distinct-inits | filecheck %s
// RUN: etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-cpu-distinct-inits, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map})' | filecheck %s --check-prefix=BUF

// A loop carrying two scratch tensors of one type, both started from one tensor.empty (what CSE
// makes of two). Without this pass one-shot-bufferize gives both iter_args the same buffer and
// writes both in place: the insert into %a clobbers the zero just written into %b, and the loop
// stores v + v instead of v + 0 (upstream's analysis misses the conflict). With it each gets its
// own empty, so each its own buffer (BUF). An empty used once is left alone.
// CHECK-LABEL: func.func @two_scratch
// CHECK: %[[O:.*]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT: %[[E:.*]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT: %[[E2:.*]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT: scf.for {{.*}} iter_args(%{{.*}} = %[[O]], %{{.*}} = %[[E]], %{{.*}} = %[[E2]])
// CHECK-NOT: tensor.empty
// BUF-LABEL: func.func @two_scratch
// BUF: %[[O:.*]] = memref.alloc() {{.*}} : memref<4xf32>
// BUF: %[[A:.*]] = memref.alloc() {{.*}} : memref<4xf32>
// BUF: %[[B:.*]] = memref.alloc() {{.*}} : memref<4xf32>
// BUF: scf.for {{.*}} iter_args(%{{.*}} = %[[O]], %{{.*}} = %[[A]], %{{.*}} = %[[B]])
func.func @two_scratch(%x: tensor<4xf32>, %n: index) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %r:3 = scf.for %i = %c0 to %n step %c1 iter_args(%out = %o, %a = %e, %b = %e) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
    %b1 = tensor.insert %z into %b[%c0] : tensor<4xf32>
    %v = tensor.extract %x[%i] : tensor<4xf32>
    %a1 = tensor.insert %v into %a[%c0] : tensor<4xf32>
    %va = tensor.extract %a1[%c0] : tensor<4xf32>
    %vb = tensor.extract %b1[%c0] : tensor<4xf32>
    %s = arith.addf %va, %vb : f32
    %b2 = tensor.insert %s into %b1[%c0] : tensor<4xf32>
    %vb2 = tensor.extract %b2[%c0] : tensor<4xf32>
    %out2 = tensor.insert %vb2 into %out[%i] : tensor<4xf32>
    scf.yield %out2, %a1, %b2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  }
  return %r#0 : tensor<4xf32>
}

// -----

// A loop the threads share (etc.thread_split: here a batched GEMM's batches) whose body copies
// into a per-iteration buffer that CSE merged with an empty of the same type outside it (a weight
// pack's). Each use inside the loop gets its own empty there, so bufferization allocates it
// inside the loop and etc-cpu-plan-scratch makes it a per-thread stack buffer; the empty outside
// keeps its use outside. A loop without the mark is left alone.
// CHECK-LABEL: func.func @shared_loop
// CHECK: %[[E:.*]] = tensor.empty() : tensor<4xf32>
// CHECK: scf.for {{.*}} iter_args(%[[O:.*]] = %{{.*}})
// CHECK-NEXT: %[[MINE:.*]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT: scf.for {{.*}} iter_args(%{{.*}} = %[[MINE]])
// CHECK: } {etc.thread_split}
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[E]])
// CHECK: return
// BUF-LABEL: func.func @shared_loop
// BUF: scf.for
// BUF-NEXT: memref.alloc() {{.*}} : memref<4xf32>
func.func @shared_loop(%x: tensor<8x4xf32>, %o: tensor<8xf32>) -> (tensor<8xf32>, tensor<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %e = tensor.empty() : tensor<4xf32>
  %r = scf.for %b = %c0 to %c8 step %c1 iter_args(%out = %o) -> (tensor<8xf32>) {
    %panel = scf.for %k = %c0 to %c4 step %c1 iter_args(%p = %e) -> (tensor<4xf32>) {
      %v = tensor.extract %x[%b, %k] : tensor<8x4xf32>
      %p2 = tensor.insert %v into %p[%k] : tensor<4xf32>
      scf.yield %p2 : tensor<4xf32>
    }
    %first = tensor.extract %panel[%c0] : tensor<4xf32>
    %out2 = tensor.insert %first into %out[%b] : tensor<8xf32>
    scf.yield %out2 : tensor<8xf32>
  } {etc.thread_split}
  %w = scf.for %k = %c0 to %c4 step %c1 iter_args(%p = %e) -> (tensor<4xf32>) {
    %v = tensor.extract %x[%c0, %k] : tensor<8x4xf32>
    %p2 = tensor.insert %v into %p[%k] : tensor<4xf32>
    scf.yield %p2 : tensor<4xf32>
  }
  return %r, %w : tensor<8xf32>, tensor<4xf32>
}
