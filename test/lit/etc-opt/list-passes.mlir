// RUN: etc-opt --list-passes | filecheck %s
// RUN: etc-opt --help | filecheck %s --check-prefix=HELP

// CHECK: etc passes
// CHECK: etc-canonicalize-aten
// CHECK-NEXT: Remove aten no-ops
// CHECK: etc-convert-aten-to-edge
// CHECK: etc-dce
// CHECK-NEXT: Erase ops without side effects whose results are unused
// CHECK: etc-memory-planning
// CHECK-NEXT: Plan the memory
// CHECK-NEXT: algorithm=<str> placement algorithm (greedy, naive) (default: greedy)
// CHECK-NEXT: alignment=<int> byte alignment of every allocation (default: 16)
// CHECK-NEXT: alloc-graph-input=<bool> {{.*}}(default: false)
// CHECK-NEXT: alloc-graph-output=<bool> {{.*}}(default: true)

// HELP: --pass-pipeline
// HELP: --split-input-file
// HELP: --verify-diagnostics
// HELP: etc passes:
// HELP: --etc-dce
