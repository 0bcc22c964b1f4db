// RUN: etc-opt %s --etc-dce --allow-unregistered-dialect | filecheck %s
// RUN: etc-opt %s --pass-pipeline='builtin.module(func.func(etc-dce))' --allow-unregistered-dialect | filecheck %s
// RUN: etc-opt %s --etc-dce --allow-unregistered-dialect --mlir-pass-statistics -o /dev/null 2>&1 | filecheck %s --check-prefix=STATS
// STATS: // pass statistics: etc-dce: erased = 7

ml_program.global private mutable @state(dense<0.0> : tensor<4xf32>) : tensor<4xf32>
ml_program.global private @weight(dense<1.0> : tensor<4xf32>) : tensor<4xf32>

// CHECK-LABEL: func.func @forward
func.func @forward(%x: tensor<4xf32>, %c: i1, %m: memref<4xf32>, %f: f32) -> tensor<4xf32> {
  // A dead chain goes in one backward sweep.
  // CHECK-NOT: aten.neg
  // CHECK-NOT: aten.relu
  %0 = "aten.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "aten.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NOT: tensor.empty
  %e = tensor.empty() : tensor<4xf32>
  // CHECK-NOT: global_load_const
  %w = ml_program.global_load_const @weight : tensor<4xf32>
  // A region op whose body is pure is dead when its result is unused.
  // CHECK-NOT: scf.if %arg1 -> (i32)
  %one = arith.constant 1 : i32
  %r = scf.if %c -> i32 {
    %k = arith.addi %one, %one : i32
    scf.yield %k : i32
  } else {
    scf.yield %one : i32
  }
  // Side effects stay: stores, a region op holding one, calls, unregistered ops.
  // CHECK: %[[I:.+]] = arith.constant 0 : index
  // CHECK: memref.store %arg3, %arg2[%[[I]]]
  %i = arith.constant 0 : index
  memref.store %f, %m[%i] : memref<4xf32>
  // CHECK: scf.if %arg1 {
  // CHECK: memref.store
  scf.if %c {
    memref.store %f, %m[%i] : memref<4xf32>
  }
  // CHECK: ml_program.global_store @state = %arg0
  ml_program.global_store @state = %x : tensor<4xf32>
  // CHECK: call @helper(%arg0)
  %h = func.call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK: "foo.effect"(%arg0)
  %u = "foo.effect"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  // Used values stay.
  // CHECK: %[[S:.+]] = "aten.sigmoid"(%arg0)
  // CHECK: return %[[S]]
  %s = "aten.sigmoid"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// Symbols are never erased, even when unused.
// CHECK-LABEL: func.func private @helper
func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: return %arg0
  %0 = "aten.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %x : tensor<4xf32>
}
