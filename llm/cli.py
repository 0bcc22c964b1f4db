"""`etc generate`: stream a completion from an etc.llm program.

    etc generate model.pte --tokenizer tokenizer.json --prompt "Once upon a time" \\
        [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S] [--stop-token ID ...]

The text goes to stdout as it is generated; the prefill and decode token counts and
tokens/s go to stderr, so `> out.txt` keeps only the text.
"""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="generate text with an etc.llm program (streams tokens, prints tokens/s)")
    g.add_argument("program", help="a .pte exported with etc.llm.export_llm")
    g.add_argument("--tokenizer", required=True, help="a tokenizer.json (the tokenizers library's format)")
    g.add_argument("--data-path", default=None, help="the weights' .ptd (export_llm(external_weights=True))")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0, help="0 (the default) is greedy")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep the tokens reaching this mass")
    g.add_argument("--seed", type=int, default=None, help="seed of the sampler (for reproducible sampling)")
    g.add_argument("--stop-token", type=int, nargs="*", default=None,
                   help="stop at these token ids (default: the program's get_eos_ids)")
    g.set_defaults(fn=cmd_generate)


def cmd_generate(args) -> int:
    from etc.llm.generator import TextGenerator

    generator = TextGenerator(args.program, args.tokenizer, data_path=args.data_path)

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    result = generator.generate(args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                top_p=args.top_p, seed=args.seed, stop_tokens=args.stop_token, on_text=stream)
    sys.stdout.write("\n")
    stats = result.stats
    print(f"prefill: {stats.prompt_tokens} tokens, {stats.prefill_tokens_per_second:.1f} tokens/s", file=sys.stderr)
    print(f"decode: {stats.generated_tokens} tokens, {stats.decode_tokens_per_second:.1f} tokens/s "
          f"(stopped by {result.stopped_by.replace('_', ' ')})", file=sys.stderr)
    return 0
