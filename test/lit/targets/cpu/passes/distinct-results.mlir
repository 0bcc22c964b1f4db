// RUN: etc-opt %s --etc-cpu-distinct-results | filecheck %s
// RUN: etc-opt %s --pass-pipeline='builtin.module(etc-cpu-distinct-results, buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true})' | filecheck %s --check-prefix=OUT

// One value returned twice: the second result gets its own buffer, a copy of the first, so that
// buffer-results-to-out-params (which would otherwise erase the shared alloc twice) makes two
// out-params.
// CHECK-LABEL: func.func @twice
// CHECK: %[[A:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[OTHER:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[B:.*]] = memref.alloc() : memref<4xf32>
// CHECK-NEXT: memref.copy %[[A]], %[[B]]
// CHECK-NEXT: return %[[A]], %[[B]], %[[OTHER]]
// OUT: func.func @twice(%{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>)
func.func @twice(%x: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>) {
  %a = memref.alloc() : memref<4xf32>
  linalg.copy ins(%x : memref<4xf32>) outs(%a : memref<4xf32>)
  %b = memref.alloc() : memref<4xf32>
  return %a, %a, %b : memref<4xf32>, memref<4xf32>, memref<4xf32>
}
