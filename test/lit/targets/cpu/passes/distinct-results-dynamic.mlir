// RUN: etc-opt %s --etc-cpu-distinct-results | filecheck %s

// A dynamically shaped result returned twice: the copy's alloc takes the run-time size.
// CHECK-LABEL: func.func @dynamic
// CHECK: %[[N:.*]] = memref.dim %arg0, %{{.*}} : memref<?xf32>
// CHECK: %[[COPY:.*]] = memref.alloc(%[[N]]) : memref<?xf32>
// CHECK: memref.copy %arg0, %[[COPY]]
// CHECK: return %arg0, %[[COPY]]
func.func @dynamic(%x: memref<?xf32>) -> (memref<?xf32>, memref<?xf32>) {
  return %x, %x : memref<?xf32>, memref<?xf32>
}
