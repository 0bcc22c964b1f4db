"""The cpu target's kernel library: what each tuned pass of `passes/` builds, one family per module.

Each family is split the way MLIR's BlockPackMatmul is (library function, pattern, thin pass):
`<family>_match.py` reads the IR (what an op is, whether the kernel takes it, and why not),
`<family>_kernel.py` writes the kernel's IR (text through `kernel_ir.KernelText`), and the pass
in `passes/` walks the module, records each decision and splices the kernel in:

    gemm_match, gemm_kernel, gemm_schedule   etc-cpu-gemm-kernels, -gemm-regions, -tile-gemm-kernels
    window_match, window_kernel              etc-cpu-window-kernels
    row_match, row_kernel                    etc-cpu-row-kernels
    int8_match, int8_kernel,                 etc-cpu-int8-kernels
    dynamic_linear_kernel,
    im2col_pack
"""
