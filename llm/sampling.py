"""Next-token choice from one row of logits: greedy, temperature, nucleus (top-p).

numpy only, with one seeded `numpy.random.Generator` per generation, so a `--seed` run
reproduces its tokens exactly; temperature 0 is argmax (what the equality tests compare
against eager greedy decoding).
"""

from __future__ import annotations

import numpy as np

from etc.errors import EtcError


class Sampler:
    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None):
        if temperature < 0:
            raise EtcError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise EtcError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.rng = np.random.default_rng(seed)

    def __call__(self, logits) -> int:
        logits = np.asarray(logits, dtype=np.float64).reshape(-1)
        if self.temperature == 0.0:
            return int(np.argmax(logits))
        scaled = logits / self.temperature
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        if self.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cumulative = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cumulative, self.top_p)) + 1]  # the smallest set reaching top_p
            mask = np.zeros_like(probs)
            mask[keep] = probs[keep]
            probs = mask / mask.sum()
        return int(self.rng.choice(probs.shape[0], p=probs))
