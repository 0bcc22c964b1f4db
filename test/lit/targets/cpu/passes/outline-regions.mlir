// RUN: etc-opt %s --split-input-file --etc-cpu-outline-regions | filecheck %s

// Each top-level loop nest of the entry becomes a private function called where it was, with the
// values it reads as arguments and the constants it uses cloned in. The second nest is the first
// on other buffers of the same types: it calls the same function (LLVM compiles it once). The
// third differs (its bound): a function of its own. Buffers are noalias as the entry's, unless two
// may overlap: the fourth reads and writes views of one buffer. A nest whose result the entry
// uses stays.
// CHECK-LABEL: func.func private @f_region0(%{{.*}}: memref<8xf32> {llvm.noalias}, %{{.*}}: memref<8xf32> {llvm.noalias})
// CHECK: %[[C8:.*]] = arith.constant 8 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C8]]
// CHECK: arith.maximumf
// CHECK-LABEL: func.func private @f_region1(%{{.*}}: memref<8xf32> {llvm.noalias}, %{{.*}}: memref<8xf32> {llvm.noalias})
// CHECK: %[[C4:.*]] = arith.constant 4 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C4]]
// CHECK-LABEL: func.func private @f_region2(%{{.*}}: memref<4xf32, strided<[1]>>, %{{.*}}: memref<4xf32, strided<[1], offset: 2>>)
// CHECK-LABEL: func.func @f(
// CHECK: call @f_region0(%arg0, %arg1)
// CHECK-NEXT: call @f_region0(%arg1, %arg2)
// CHECK-NEXT: call @f_region1(%arg0, %arg2)
// CHECK: call @f_region2(
// CHECK-NEXT: %[[S:.*]] = scf.for
// CHECK: memref.store %[[S]]
func.func @f(%x: memref<8xf32> {etc.cpu.arg = "input:0"}, %y: memref<8xf32> {etc.cpu.arg = "output:0"},
             %z: memref<8xf32> {etc.cpu.arg = "output:1"}, %s: memref<f32> {etc.cpu.arg = "output:2"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %x[%i] : memref<8xf32>
    %m = arith.maximumf %v, %zero : f32
    memref.store %m, %y[%i] : memref<8xf32>
  }
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %y[%i] : memref<8xf32>
    %m = arith.maximumf %v, %zero : f32
    memref.store %m, %z[%i] : memref<8xf32>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<8xf32>
    memref.store %v, %z[%i] : memref<8xf32>
  }
  %lo = memref.subview %y[0] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1]>>
  %hi = memref.subview %y[2] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1], offset: 2>>
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %lo[%i] : memref<4xf32, strided<[1]>>
    memref.store %v, %hi[%i] : memref<4xf32, strided<[1], offset: 2>>
  }
  %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
    %v = memref.load %x[%i] : memref<8xf32>
    %a = arith.addf %acc, %v : f32
    scf.yield %a : f32
  }
  memref.store %sum, %s[] : memref<f32>
  return
}

// -----

// A dynamic model's nests read views at the run-time sizes (memref<?x64xf32>), which the
// bare-pointer convention cannot pass: the function takes the static buffers and the size, and
// rebuilds the views. The two layers (the same kernel on other buffers) share one function.
// CHECK: func.func private @g_region0(%[[N:[a-z0-9]+]]: index, %[[A:[a-z0-9]+]]: memref<512xf32> {llvm.noalias}, %[[B:[a-z0-9]+]]: memref<512xf32> {llvm.noalias})
// CHECK-DAG: %[[AV:.*]] = memref.reinterpret_cast %[[A]] to offset: [0], sizes: [%[[N]], 64], strides: [64, 1]
// CHECK-DAG: %[[BV:.*]] = memref.reinterpret_cast %[[B]] to offset: [0], sizes: [%[[N]], 64], strides: [64, 1]
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[N]]
// CHECK: memref.load %[[AV]]
// CHECK: memref.store %{{.*}}, %[[BV]]
// CHECK-NOT: func.func private @g_region1
// CHECK-LABEL: func.func @g(
// CHECK: %[[D:.*]] = memref.load %arg2
// CHECK: %[[T:.*]] = memref.view %arg3
// CHECK: call @g_region0(%[[D]], %arg0, %[[T]])
// CHECK-NEXT: call @g_region0(%[[D]], %[[T]], %arg1)
func.func @g(%x: memref<512xf32> {etc.cpu.arg = "input:0"}, %y: memref<512xf32> {etc.cpu.arg = "output:0"},
             %dims: memref<1xindex> {etc.cpu.arg = "dims:in"}, %scratch: memref<4096xi8> {etc.cpu.arg = "scratch"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %n = memref.load %dims[%c0] : memref<1xindex>
  %xv = memref.reinterpret_cast %x to offset: [0], sizes: [%n, 64], strides: [64, 1] : memref<512xf32> to memref<?x64xf32>
  %t = memref.view %scratch[%c0][] : memref<4096xi8> to memref<512xf32>
  %tv = memref.reinterpret_cast %t to offset: [0], sizes: [%n, 64], strides: [64, 1] : memref<512xf32> to memref<?x64xf32>
  %yv = memref.reinterpret_cast %y to offset: [0], sizes: [%n, 64], strides: [64, 1] : memref<512xf32> to memref<?x64xf32>
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %xv[%i, %j] : memref<?x64xf32>
      %m = arith.maximumf %v, %zero : f32
      memref.store %m, %tv[%i, %j] : memref<?x64xf32>
    }
  }
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %tv[%i, %j] : memref<?x64xf32>
      %m = arith.maximumf %v, %zero : f32
      memref.store %m, %yv[%i, %j] : memref<?x64xf32>
    }
  }
  return
}

// -----

// Constants of any type are cloned into the function, not passed: a vector mask, and the
// poison a vector is built from.
// CHECK-LABEL: func.func private @h_region0(%{{.*}}: memref<16xi8> {llvm.noalias}, %{{.*}}: memref<16xi8> {llvm.noalias})
// CHECK-DAG: ub.poison : vector<16xi8>
// CHECK-DAG: arith.constant dense<15> : vector<16xi8>
// CHECK-LABEL: func.func @h(
// CHECK: call @h_region0(%arg0, %arg1)
func.func @h(%x: memref<16xi8> {etc.cpu.arg = "input:0"}, %y: memref<16xi8> {etc.cpu.arg = "output:0"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %mask = arith.constant dense<15> : vector<16xi8>
  %p = ub.poison : vector<16xi8>
  scf.for %i = %c0 to %c1 step %c1 {
    %v = vector.load %x[%c0] : memref<16xi8>, vector<16xi8>
    %lo = arith.andi %v, %mask : vector<16xi8>
    %s = vector.extract %lo[0] : i8 from vector<16xi8>
    %w = vector.insert %s, %p [0] : i8 into vector<16xi8>
    vector.store %w, %y[%c0] : memref<16xi8>, vector<16xi8>
  }
  return
}

// -----

// Output 0 is computed in input 0's memory (an in-place pair, `etc.cpu.in_place`): a region
// reading one and writing the other must not call them noalias; other buffers stay so.
// CHECK-LABEL: func.func private @k_region0(%{{.*}}: memref<8xf32>, %{{.*}}: memref<8xf32>)
// CHECK-LABEL: func.func private @k_region1(%{{.*}}: memref<8xf32> {llvm.noalias}, %{{.*}}: memref<8xf32> {llvm.noalias})
module attributes {etc.cpu.in_place = array<i64: 0, 0>} {
  func.func @k(%c: memref<8xf32> {etc.cpu.arg = "input:0"}, %new: memref<8xf32> {etc.cpu.arg = "output:0"},
               %y: memref<8xf32> {etc.cpu.arg = "output:1"}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %zero = arith.constant 0.0 : f32
    scf.for %i = %c0 to %c8 step %c1 {
      %v = memref.load %c[%i] : memref<8xf32>
      %m = arith.maximumf %v, %zero : f32
      memref.store %m, %new[%i] : memref<8xf32>
    }
    scf.for %i = %c0 to %c8 step %c1 {
      %v = memref.load %new[%i] : memref<8xf32>
      %m = arith.minimumf %v, %zero : f32
      memref.store %m, %y[%i] : memref<8xf32>
    }
    return
  }
}

// -----

// A stack buffer only one nest uses (a GEMM kernel's panel buffer, etc-cpu-plan-scratch) moves
// into the nest's function with its constants: on that function's frame, released when it
// returns, not on the entry's for the whole model. A vector constant is cloned in too (no
// argument of vector type).
// CHECK-LABEL: func.func private @s_region0(%{{.*}}: memref<8x64xf32> {llvm.noalias})
// CHECK-DAG: memref.alloca() {alignment = 64 : i64} : memref<64xf32>
// CHECK-DAG: arith.constant dense<1.000000e+00> : vector<64xf32>
// CHECK: scf.for
// CHECK-LABEL: func.func @s(
// CHECK-NOT: memref.alloca
// CHECK: call @s_region0(%arg0)
func.func @s(%y: memref<8x64xf32> {etc.cpu.arg = "output:0"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %one = arith.constant dense<1.0> : vector<64xf32>
  %pad = arith.constant 0.0 : f32
  %buf = memref.alloca() {alignment = 64 : i64} : memref<64xf32>
  scf.for %i = %c0 to %c8 step %c1 {
    vector.transfer_write %one, %buf[%c0] {in_bounds = [true]} : vector<64xf32>, memref<64xf32>
    %v = vector.transfer_read %buf[%c0], %pad {in_bounds = [true]} : memref<64xf32>, vector<64xf32>
    vector.transfer_write %v, %y[%i, %c0] {in_bounds = [true]} : vector<64xf32>, memref<8x64xf32>
  }
  return
}
