// RUN: etc-opt %s --split-input-file --etc-cpu-dynamic-shapes | filecheck %s
// RUN: etc-opt %s --split-input-file --etc-cpu-dynamic-shapes --etc-cpu-plan-scratch --etc-cpu-entry-abi | filecheck %s --check-prefix=ABI

// A dynamic input becomes a flat buffer at its upper bound (128 x 64 = 8192 elements) viewed at
// the size read from dims:in; the dynamic output is viewed at the size of the buffer copied into
// it, which is stored into dims:out for the runtime.
// CHECK-LABEL: func.func @f
// CHECK-SAME: %[[X:[a-z0-9]+]]: memref<8192xf32> {etc.cpu.arg = "input:0"
// CHECK-SAME: etc.cpu.dynamic = array<i64: 0>, etc.cpu.shape = array<i64: 128, 64>
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: memref<8192xf32> {etc.cpu.dynamic = array<i64: 0>, etc.cpu.shape = array<i64: 128, 64>}
// CHECK-SAME: %[[DIN:[a-z0-9]+]]: memref<1xi64> {etc.cpu.arg = "dims:in", etc.cpu.dim_ranges = array<i64: 1, 128>}
// CHECK-SAME: %[[DOUT:[a-z0-9]+]]: memref<1xi64> {etc.cpu.arg = "dims:out"}
// CHECK: %[[N64:.*]] = memref.load %[[DIN]][%{{.*}}] : memref<1xi64>
// CHECK: %[[N:.*]] = arith.index_cast %[[N64]] : i64 to index
// CHECK: %[[XV:.*]] = memref.reinterpret_cast %[[X]] to offset: [0], sizes: [%[[N]], 64], strides: [64, 1]
// CHECK: %[[T:.*]] = memref.alloc(%{{.*}}) : memref<?x64xf32>
// CHECK: linalg.exp ins(%[[XV]] : memref<?x64xf32>) outs(%[[T]] : memref<?x64xf32>)
// CHECK: memref.store %{{.*}}, %[[DOUT]][%{{.*}}] : memref<1xi64>
// CHECK: %[[OV:.*]] = memref.reinterpret_cast %[[OUT]] to offset: [0], sizes: [%{{.*}}, 64], strides: [64, 1]
// CHECK: memref.copy %[[T]], %[[OV]]
// The intermediate is planned at its upper bound (32 KB) and viewed at its run-time size.
// ABI: etc.cpu.abi = [{dtype = "float32", dynamic = array<i64: 0>, kind = "input", name = "0", shape = array<i64: 128, 64>}, {dtype = "float32", dynamic = array<i64: 0>, kind = "output", name = "0", shape = array<i64: 128, 64>}, {dtype = "int64", kind = "dims", name = "in", shape = array<i64: 1>}, {dtype = "int64", kind = "dims", name = "out", shape = array<i64: 1>}, {dtype = "uint8", kind = "scratch", name = "scratch", shape = array<i64: 0>}]
// ABI-SAME: etc.cpu.scratch_bytes = 32768 : i64
// ABI: %[[S:[a-z0-9]+]]: memref<8192xf32> {etc.cpu.arg = "scratch:0", llvm.noalias}
// ABI: memref.reinterpret_cast %[[S]] to offset: [0], sizes: [%{{.*}}, 64], strides: [64, 1]
func.func @f(%x: memref<?x64xf32> {etc.cpu.arg = "input:0", etc.dim_bounds = array<i64: 1, 128, 64, 64>},
             %out: memref<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %n = memref.dim %x, %c0 : memref<?x64xf32>
  %t = memref.alloc(%n) : memref<?x64xf32>
  linalg.exp ins(%x : memref<?x64xf32>) outs(%t : memref<?x64xf32>)
  memref.copy %t, %out : memref<?x64xf32> to memref<?x64xf32>
  return
}

// -----

// Two dynamic dims of one input: both in dims:in, in dim order; the strides are computed.
// CHECK-LABEL: func.func @two
// CHECK-SAME: memref<4096xf32> {etc.cpu.arg = "input:0", etc.cpu.dynamic = array<i64: 0, 1>, etc.cpu.shape = array<i64: 8, 16, 32>
// CHECK-SAME: etc.cpu.dim_ranges = array<i64: 1, 8, 2, 16>
// CHECK: %[[STRIDE:.*]] = arith.muli
// CHECK: memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [%{{.*}}, %{{.*}}, 32], strides: [%[[STRIDE]], 32, 1]
func.func @two(%x: memref<?x?x32xf32> {etc.cpu.arg = "input:0", etc.dim_bounds = array<i64: 1, 8, 2, 16, 32, 32>},
               %out: memref<8x16x32xf32>) {
  %c0 = arith.constant 0 : index
  %v = memref.load %x[%c0, %c0, %c0] : memref<?x?x32xf32>
  linalg.fill ins(%v : f32) outs(%out : memref<8x16x32xf32>)
  return
}

