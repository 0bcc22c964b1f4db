// RUN: etc-opt %s --split-input-file --etc-cpu-profile-regions | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-profile-regions=merge=false | filecheck %s --check-prefix=SPLIT

// A flat entry: a padding copy and the kernel inlined at the convolution (its CallSiteLoc's caller
// is the convolution) share the convolution's node, so they are one region; the ReLU nest is the
// next. The counter is read at the start and after each region, into a new scratch argument after
// the others (offset 64: the first free 64-byte boundary), which the ABI and the scratch size
// record; the module names each region's nodes and the user's lines.
// CHECK: etc.cpu.abi = [{{.*}}{dtype = "uint8", kind = "scratch", name = "scratch", shape = array<i64: 0>}, {dtype = "uint8", kind = "scratch", name = "scratch", shape = array<i64: 64>}]
// CHECK-SAME: etc.cpu.profile = {offset = 64 : i64, regions = [{name = "conv2d", nodes = ["conv2d"], sources = ["model.py:10"]}, {name = "relu", nodes = ["relu"], sources = ["model.py:11"]}]}
// CHECK-SAME: etc.cpu.scratch_bytes = 128 : i64
// CHECK: func.func @f(%{{.*}}: memref<8xf32> {{{.*}}}, %{{.*}}: memref<8xf32> {{{.*}}}, %{{.*}}: memref<8xf32> {etc.cpu.arg = "scratch:0", llvm.noalias}, %[[BUF:[a-z0-9]+]]: memref<3xi64> {etc.cpu.arg = "scratch:64", llvm.noalias})
// CHECK-NEXT: %[[T0:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CHECK-NEXT: %[[S0:.*]] = arith.constant 0 : index
// CHECK-NEXT: memref.store %[[T0]], %[[BUF]][%[[S0]]] : memref<3xi64>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.addf
// CHECK: }
// CHECK-NEXT: %[[T1:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CHECK-NEXT: %[[S1:.*]] = arith.constant 1 : index
// CHECK-NEXT: memref.store %[[T1]], %[[BUF]][%[[S1]]] : memref<3xi64>
// CHECK-NEXT: scf.for
// CHECK: arith.maximumf
// CHECK: }
// CHECK-NEXT: %[[T2:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
// CHECK-NEXT: %[[S2:.*]] = arith.constant 2 : index
// CHECK-NEXT: memref.store %[[T2]], %[[BUF]][%[[S2]]] : memref<3xi64>
// CHECK-NEXT: return
// Without merging, each nest is its own region (the second one named "conv2d #2").
// SPLIT: regions = [{name = "conv2d", {{.*}}}, {name = "conv2d #2", {{.*}}}, {name = "relu", {{.*}}}]
// SPLIT: memref<4xi64> {etc.cpu.arg = "scratch:64", llvm.noalias}
#conv = loc("conv2d"("model.py":10:5))
#relu = loc("relu"("model.py":11:5))
#kernel = loc(callsite("-":5:11 at #conv))
module attributes {etc.cpu.abi = [{dtype = "float32", kind = "input", name = "0", shape = array<i64: 8>}, {dtype = "float32", kind = "output", name = "0", shape = array<i64: 8>}, {dtype = "uint8", kind = "scratch", name = "scratch", shape = array<i64: 0>}], etc.cpu.scratch_bytes = 64 : i64} {
  func.func @f(%x: memref<8xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<8xf32> {etc.cpu.arg = "output:0", llvm.noalias}, %tmp: memref<8xf32> {etc.cpu.arg = "scratch:0", llvm.noalias}) attributes {etc.cpu.scratch_bytes = 64 : i64} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %z = arith.constant 0.0 : f32
    scf.for %i = %c0 to %c8 step %c1 {
      %v = memref.load %x[%i] : memref<8xf32>
      memref.store %v, %tmp[%i] : memref<8xf32>
    } loc(#conv)
    scf.for %i = %c0 to %c8 step %c1 {
      %v = memref.load %tmp[%i] : memref<8xf32>
      %w = arith.addf %v, %v : f32
      memref.store %w, %tmp[%i] : memref<8xf32>
    } loc(#kernel)
    scf.for %i = %c0 to %c8 step %c1 {
      %v = memref.load %tmp[%i] : memref<8xf32>
      %m = arith.maximumf %v, %z : f32
      memref.store %m, %out[%i] : memref<8xf32>
    } loc(#relu)
    return
  }
}

// -----

// A threaded entry (after etc-cpu-split-threads): a region ends after the barrier that follows its
// nest (every thread done), the buffer goes before (barrier, tid, nthreads), and only thread 0
// stores its reads. Without other scratch, the buffer is at offset 0.
// CHECK: etc.cpu.profile = {offset = 0 : i64, regions = [{name = "conv2d", {{.*}}}, {name = "sum", {{.*}}}]}
// CHECK-SAME: etc.cpu.scratch_bytes = 64 : i64
// CHECK: func.func @g(%{{.*}}: memref<8xf32> {{{.*}}}, %{{.*}}: memref<1xf32> {{{.*}}}, %[[BUF:[a-z0-9]+]]: memref<3xi64> {etc.cpu.arg = "scratch:0", llvm.noalias}, %[[BARRIER:[a-z0-9]+]]: memref<2xi32>, %[[TID:[a-z0-9]+]]: index, %[[N:[a-z0-9]+]]: index)
// CHECK: %[[T0:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"()
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[TID]], %{{.*}} : index
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: memref.store %[[T0]], %[[BUF]]
// CHECK: scf.for %{{.*}} = %[[TID]] to %{{.*}} step %[[N]]
// CHECK: call @etc_cpu_barrier(%[[BARRIER]], %[[N]])
// CHECK-NEXT: %[[T1:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"()
// CHECK: scf.if
// CHECK-NEXT: memref.store %[[T1]], %[[BUF]]
// CHECK: scf.if
// CHECK: call @etc_cpu_barrier(%[[BARRIER]], %[[N]])
// CHECK-NEXT: %[[T2:.*]] = llvm.call_intrinsic "llvm.readcyclecounter"()
#conv = loc("conv2d"("model.py":10:5))
#sum = loc("sum"("model.py":12:5))
module attributes {etc.cpu.abi = [{dtype = "float32", kind = "input", name = "0", shape = array<i64: 8>}, {dtype = "float32", kind = "output", name = "0", shape = array<i64: 1>}], etc.cpu.scratch_bytes = 0 : i64} {
  func.func private @etc_cpu_barrier(memref<2xi32>, index)
  func.func @g(%x: memref<8xf32> {etc.cpu.arg = "input:0", llvm.noalias}, %out: memref<1xf32> {etc.cpu.arg = "output:0", llvm.noalias}, %barrier: memref<2xi32>, %tid: index, %n: index) attributes {etc.cpu.threaded} {
    %c0 = arith.constant 0 : index
    %c8 = arith.constant 8 : index
    scf.for %i = %tid to %c8 step %n {
      %v = memref.load %x[%i] : memref<8xf32>
      %w = arith.addf %v, %v : f32
      memref.store %w, %x[%i] : memref<8xf32>
    } loc(#conv)
    call @etc_cpu_barrier(%barrier, %n) : (memref<2xi32>, index) -> ()
    %first = arith.cmpi eq, %tid, %c0 : index
    scf.if %first {
      %v = memref.load %x[%c0] : memref<8xf32>
      memref.store %v, %out[%c0] : memref<1xf32>
    } loc(#sum)
    call @etc_cpu_barrier(%barrier, %n) : (memref<2xi32>, index) -> ()
    return
  }
}

