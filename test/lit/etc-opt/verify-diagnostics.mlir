// --verify-diagnostics checks the diagnostics against expected-* comments.
// RUN: etc-opt %s --split-input-file --verify-diagnostics --etc-test-diagnostics | filecheck %s

// An invalid op: the verifier's error (the chunk produces no output).
func.func @bad(%x: i32) -> i32 {
  // expected-error @below {{'arith.addi' op requires the same type for all operands and results}}
  %0 = "arith.addi"(%x, %x) : (i32, i32) -> i64
  return %x : i32
}

// -----

// A pass's warnings (@-N, @above, same line) and its error.
func.func @pass_diagnostics(%x: i32) -> i32 {
  %0 = arith.addi %x, %x {etc.test_diagnostic = "first warning"} : i32
  // expected-warning @-1 {{first warning}}
  %1 = arith.addi %x, %x {etc.test_diagnostic = "second warning"} : i32 // expected-warning {{second}}
  %2 = arith.addi %x, %x {etc.test_diagnostic = "error: failing op 42; note: a note about it"} : i32
  // expected-error-re @above {{failing op {{[0-9]+}}}}
  // expected-note @-2 {{a note about it}}
  return %x : i32
}

// -----

// A parse error.
func.func @parse_error() {
  // expected-error @+1 {{custom op 'not_an_op' is unknown}}
  not_an_op
}

// -----

// No diagnostics: the module is printed.
// CHECK: func.func @fine
// CHECK-NOT: func.func @bad
func.func @fine(%x: i32) -> i32 {
  return %x : i32
}
