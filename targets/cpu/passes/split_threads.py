"""etc-cpu-split-threads: the entry's loop nests shared by the runtime's threads (the threaded ABI).

The object stays self-contained (no OpenMP, no pthreads calls): the runtime calls the same
entry from `nthreads` threads, each with its index, and the code splits the work itself
(`etc.targets.cpu.parallel`): every top-level linalg op is lowered to loops in its own
order with one loop marked `etc.thread_split` (the kernels mark the loops whose iterations are
independent: a GEMM's batch and column panels, every row dimension of a row kernel, a
blocked transpose's block loops), each thread runs a chunk of one marked loop (of those a
nest offers, the best balanced for `threads` threads: `thread_split_choice.choose_split`; a GEMM panel's
peeled partial row block beside a shared row loop runs on the last thread), single-thread
work runs under `tid == 0`, and a barrier follows each nest. Adds the arguments (barrier, tid,
nthreads) the entry wrapper passes. Replaces `convert-linalg-to-loops` in a threaded pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from etc.passes.pass_api import function_pass, option
from etc.targets.cpu.entry_args import entry_function


@dataclass
class SplitThreadsOptions:
    threads: int = option(2, help="the thread count the chunks are balanced for (the code runs on any count)")


@function_pass("etc-cpu-split-threads", "Lower to loops shared by nthreads callers of one entry (threaded ABI)",
               SplitThreadsOptions)
def split_threads(module, options=None) -> int:
    from torch_mlir import ir

    from etc.targets.cpu.parallel import lower_with_thread_splits, partition_top_level_loops

    threads = options.threads if options is not None else 2
    fn = entry_function(module)
    with module.context, ir.Location.unknown():
        lower_with_thread_splits(module, fn, threads)
        barriers = partition_top_level_loops(fn, threads)
        fn.attributes["etc.cpu.threaded"] = ir.UnitAttr.get()
    return barriers
