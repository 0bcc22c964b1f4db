// A user's passes from a .py file beside this test, loaded with --load-pass-plugin.
// RUN: etc-opt %s --load-pass-plugin=%S/Inputs/user_passes.py --user-forward-alias | filecheck %s
// RUN: etc-opt %s --load-pass-plugin %S/Inputs/user_passes.py --pass-pipeline='builtin.module(user-forward-alias, user-count-ops{dialect=aten})' 2>&1 | filecheck %s --check-prefix=PIPE
// RUN: etc-opt --load-pass-plugin=%S/Inputs/user_passes.py --list-passes | filecheck %s --check-prefix=LIST
// RUN: not etc-opt %s --load-pass-plugin=%S/Inputs/user_passes.py --user-broken 2>&1 | filecheck %s --check-prefix=BUG
// RUN: not etc-opt %s --user-forward-alias 2>&1 | filecheck %s --check-prefix=UNLOADED
// RUN: not etc-opt %s --load-pass-plugin=%S/Inputs/no_such_file.py 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not etc-opt %s --load-pass-plugin=no_such_module_xyz 2>&1 | filecheck %s --check-prefix=NOMODULE

// CHECK-LABEL: func.func @f
// CHECK-NOT: aten.alias
// CHECK: %[[R:.*]] = "aten.neg"(%arg0)
// CHECK-NEXT: return %[[R]]

// PIPE: remark: 1 aten ops
// PIPE-NOT: aten.alias

// LIST: user-broken
// LIST: A pass with a bug in it
// LIST: user-count-ops
// LIST: dialect=<str>  the dialect whose ops are counted (default: aten)
// LIST: user-forward-alias
// LIST-NEXT: Replace aten.alias by its operand (a patterns() pass)

// BUG: user_passes.py:46: error: pass 'user-broken' raised KeyError: 'threshold'
// BUG-NEXT: note: in `return limits["threshold"]`
// BUG-NOT: bug in etc
// BUG-NOT: Traceback

// UNLOADED: error: unknown pass or option '--user-forward-alias'

// MISSING: error: pass plugin '{{.*}}no_such_file.py': no such file

// NOMODULE: error: pass plugin 'no_such_module_xyz': no module named 'no_such_module_xyz'

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = "aten.alias"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %n = "aten.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %n : tensor<4xf32>
}
