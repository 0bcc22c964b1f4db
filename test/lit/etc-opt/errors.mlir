// User errors are MLIR diagnostics on stderr and exit status 1, never a traceback.
// RUN: not etc-opt %s --split-input-file --pass-pipeline='builtin.module(etc-dce, one-shot-bufferize, cse)' 2>&1 | filecheck %s --check-prefix=UPFAIL
// UPFAIL: errors.mlir:[[# @LINE + 28]]:8: error: op was not bufferized (pass 'one-shot-bufferize' failed)
// RUN: not etc-opt %s --etc-dcx 2>&1 | filecheck %s --check-prefix=FLAG
// FLAG: error: unknown pass or option '--etc-dcx'; did you mean '--etc-dce'?
// RUN: not etc-opt %s --pass-pipeline='builtin.module(func.func(etc-dcx))' 2>&1 | filecheck %s --check-prefix=PIPE
// PIPE: <pass-pipeline>:1:26: error: 'etc-dcx' does not refer to a registered pass; did you mean 'etc-dce'?
// RUN: not etc-opt %s --pass-pipeline='builtin.module(canonicalise)' 2>&1 | filecheck %s --check-prefix=UPSTREAM
// UPSTREAM: <pass-pipeline>:1:16: error: 'canonicalise' does not refer to a registered pass; did you mean 'canonicalize'
// RUN: not etc-opt %s --pass-pipeline='builtin.module(etc-memory-planning{alignmnt=64})' 2>&1 | filecheck %s --check-prefix=OPTION
// OPTION: <pass-pipeline>:1:16: error: unknown option 'alignmnt' of etc-memory-planning; valid options: algorithm, alignment, alloc-graph-input, alloc-graph-output, report
// RUN: not etc-opt %s --etc-memory-planning=alignment=wide 2>&1 | filecheck %s --check-prefix=VALUE
// VALUE: {{^}}error: option 'alignment' of etc-memory-planning expects an integer, got 'wide'
// RUN: not etc-opt %s --pass-pipeline='builtin.module(canonicalize{max-iteration=3})' 2>&1 | filecheck %s --check-prefix=UPOPT
// UPOPT: <pass-pipeline>:1:16: error: invalid upstream pass 'canonicalize{max-iteration=3}': {{.*}}no such option max-iteration
// RUN: not etc-opt %s --pass-pipeline='builtin.module(func.func(etc-dce, cse)' 2>&1 | filecheck %s --check-prefix=NEST
// NEST: <pass-pipeline>:1:39: error: expected ')' to close '(' at column 15
// RUN: not etc-opt %s --pass-pipeline='builtin.module(etc-dce cse)' 2>&1 | filecheck %s --check-prefix=COMMA
// COMMA: <pass-pipeline>:1:24: error: expected ',' or ')', found 'c'
// RUN: not etc-opt %s --pass-pipeline='builtin.module(etc-dce)' --cse 2>&1 | filecheck %s --check-prefix=BOTH
// BOTH: error: --pass-pipeline cannot be combined with pass flags (--cse)
// RUN: not etc-opt %t.does-not-exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING: error: could not open input file '{{.*}}does-not-exist.mlir': No such file or directory
// RUN: not etc-opt %s --split-input-file --etc-test-diagnostics=break-ir 2>&1 | filecheck %s --check-prefix=VERIFY
// VERIFY: errors.mlir:[[# @LINE + 6]]:8: error: block with no terminator, has {{.*}} (the IR is invalid after pass 'etc-test-diagnostics')
// RUN: not etc-opt %s --split-input-file --etc-test-diagnostics 2>&1 | filecheck %s --check-prefix=PASS
// PASS: errors.mlir:[[# @LINE + 4]]:8: error: this op is wrong
// RUN: not etc-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=PARSE
// PARSE: errors.mlir:[[# @LINE + 7]]:8: error: op expects exactly 1 operands, but got 0
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "aten.relu"(%x) {etc.test_diagnostic = "error: this op is wrong"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
// -----
func.func @g() -> tensor<4xf32> {
  %1 = "aten.relu"() : () -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
