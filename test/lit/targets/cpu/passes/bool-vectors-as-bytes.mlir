// RUN: etc-opt %s --split-input-file --verify-diagnostics --etc-cpu-bool-vectors-as-bytes | filecheck %s

// A vector of i1 loaded from a bool tensor (one byte per element) reads N bytes and truncates;
// a vector of i1 stored into one extends to bytes first. LLVM would otherwise pack N bits.
// CHECK-LABEL: llvm.func @load_store
// CHECK: %[[P:.*]] = llvm.getelementptr %arg0[%arg2] : (!llvm.ptr, i64) -> !llvm.ptr, i1
// CHECK: %[[B:.*]] = llvm.load %[[P]] {alignment = 1 : i64} : !llvm.ptr -> vector<64xi8>
// CHECK: %[[M:.*]] = llvm.trunc %[[B]] : vector<64xi8> to vector<64xi1>
// CHECK: %[[N:.*]] = llvm.xor %[[M]]
// CHECK: %[[W:.*]] = llvm.zext %[[N]] : vector<64xi1> to vector<64xi8>
// CHECK: llvm.store %[[W]], %arg1 {alignment = 1 : i64} : vector<64xi8>, !llvm.ptr
// CHECK-NOT: xi1>, !llvm.ptr
llvm.func @load_store(%src: !llvm.ptr, %dst: !llvm.ptr, %i: i64) {
  %p = llvm.getelementptr %src[%i] : (!llvm.ptr, i64) -> !llvm.ptr, i1
  %m = llvm.load %p {alignment = 1 : i64} : !llvm.ptr -> vector<64xi1>
  %t = llvm.mlir.constant(dense<true> : vector<64xi1>) : vector<64xi1>
  %n = llvm.xor %m, %t : vector<64xi1>
  llvm.store %n, %dst {alignment = 1 : i64} : vector<64xi1>, !llvm.ptr
  llvm.return
}

// -----

// Masked accesses (a partial tile): the data is bytes, the mask stays a vector of i1, the
// pass-through is extended. f32 and scalar i1 accesses are left alone.
// CHECK-LABEL: llvm.func @masked
// CHECK: %[[PT:.*]] = llvm.zext %arg2 : vector<16xi1> to vector<16xi8>
// CHECK: %[[B:.*]] = llvm.intr.masked.load %arg0, %arg2, %[[PT]] {alignment = 1 : i32} : (!llvm.ptr, vector<16xi1>, vector<16xi8>) -> vector<16xi8>
// CHECK: %[[M:.*]] = llvm.trunc %[[B]] : vector<16xi8> to vector<16xi1>
// CHECK: %[[W:.*]] = llvm.zext %[[M]] : vector<16xi1> to vector<16xi8>
// CHECK: llvm.intr.masked.store %[[W]], %arg1, %arg2 {alignment = 1 : i32} : vector<16xi8>, vector<16xi1> into !llvm.ptr
// CHECK: llvm.load %arg3 {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
// CHECK: llvm.load %arg0 : !llvm.ptr -> i1
llvm.func @masked(%src: !llvm.ptr, %dst: !llvm.ptr, %mask: vector<16xi1>, %f: !llvm.ptr) -> (vector<16xf32>) {
  %m = llvm.intr.masked.load %src, %mask, %mask {alignment = 1 : i32} : (!llvm.ptr, vector<16xi1>, vector<16xi1>) -> vector<16xi1>
  llvm.intr.masked.store %m, %dst, %mask {alignment = 1 : i32} : vector<16xi1>, vector<16xi1> into !llvm.ptr
  %v = llvm.load %f {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
  %s = llvm.load %src : !llvm.ptr -> i1
  llvm.return %v : vector<16xf32>
}

// -----

llvm.func @packed_slot() {
  %c = llvm.mlir.constant(1 : i64) : i64
  // expected-error @+1 {{a stack slot of a bool vector type}}
  %slot = llvm.alloca %c x vector<16xi1> : (i64) -> !llvm.ptr
  llvm.return
}
