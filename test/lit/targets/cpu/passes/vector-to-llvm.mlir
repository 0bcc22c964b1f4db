// RUN: etc-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(etc-cpu-vector-to-llvm{index-bitwidth=32})' | filecheck %s

// A 32-bit target: the transfers become vector loads and stores through memref descriptors of i32
// sizes, as finalize-memref-to-llvm{index-bitwidth=32} builds them (upstream's convert-vector-to-llvm
// used i64 whatever the target, and the lowering left unrealized casts).
// CHECK: module attributes {dlti.dl_spec = #dlti.dl_spec<index = 32 : i64>}
// CHECK-LABEL: func.func @copy4
// CHECK-NOT: i64>
// CHECK: builtin.unrealized_conversion_cast %{{.*}} : memref<16xf32> to !llvm.struct<(ptr, ptr, i32, array<1 x i32>, array<1 x i32>)>
// CHECK: llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr, i32) -> !llvm.ptr, f32
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> vector<4xf32>
// CHECK: llvm.store %{{.*}} : vector<4xf32>, !llvm.ptr
// CHECK-NOT: vector.transfer
func.func @copy4(%src: memref<16xf32>, %dst: memref<16xf32>, %i: index) {
  %pad = arith.constant 0.0 : f32
  %v = vector.transfer_read %src[%i], %pad {in_bounds = [true]} : memref<16xf32>, vector<4xf32>
  vector.transfer_write %v, %dst[%i] {in_bounds = [true]} : vector<4xf32>, memref<16xf32>
  return
}

// -----

// A read that may pass the buffer's end (the int8 im2col's): a mask from the remaining length, a
// masked load (as convert-vector-to-llvm lowers it), through the 32-bit descriptor.
// CHECK-LABEL: func.func @tail
// CHECK: arith.subi %{{.*}}, %{{.*}} : index
// CHECK: arith.cmpi sgt, %{{.*}}, %{{.*}} : vector<16xi64>
// CHECK: llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr, i32) -> !llvm.ptr, i8
// CHECK: llvm.intr.masked.load
// CHECK-NOT: vector.transfer
func.func @tail(%src: memref<10xi8>, %i: index) -> vector<16xi8> {
  %pad = arith.constant 0 : i8
  %v = vector.transfer_read %src[%i], %pad : memref<10xi8>, vector<16xi8>
  return %v : vector<16xi8>
}

// -----

// The pass writes the data layout; one already there is not overwritten.
// expected-error @+1 {{the module already has a data layout}}
module attributes {dlti.dl_spec = #dlti.dl_spec<index = 64 : i64>} {
  func.func @f() {
    return
  }
}
