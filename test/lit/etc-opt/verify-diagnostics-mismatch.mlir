// An unexpected diagnostic and an expectation nothing produced both fail --verify-diagnostics.
// RUN: not etc-opt %s --verify-diagnostics --etc-test-diagnostics 2>&1 | filecheck %s

func.func @f(%x: i32) -> i32 {
  // CHECK: verify-diagnostics-mismatch.mlir:[[# @LINE + 1]]:8: error: unexpected warning: nobody expects this
  %0 = arith.addi %x, %x {etc.test_diagnostic = "nobody expects this"} : i32
  // CHECK: verify-diagnostics-mismatch.mlir:[[# @LINE + 1]]:6: error: expected error "never produced" was not produced
  // expected-error @below {{never produced}}
  return %x : i32
}
