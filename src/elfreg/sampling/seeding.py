"""Per-sample random streams derived from (seed, global sample index), independent of batching (spec §5)."""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1

# Stream ids: the grid and the state noise use separate generators so that changing the sampler
# (which consumes a different amount of noise) never changes the grid of the same sample.
STREAM_NOISE = 0
STREAM_GRID = 1


def _splitmix64(x: int) -> int:
    """One round of the SplitMix64 finaliser (a bijective 64-bit mixer)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_seed(seed: int, prompt_index: int, sample_index: int, stream: int) -> int:
    """63-bit seed of one sample's stream; a sample is identified by (prompt index, sample index).

    Formula: h = splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ prompt_index) ^ sample_index) ^ stream) >> 1.
    Keying by the pair (not by prompt_index * samples + sample_index) keeps the first k samples of a
    prompt unchanged when more samples per prompt are requested later.
    """
    for name, v in (("seed", seed), ("prompt_index", prompt_index), ("sample_index", sample_index), ("stream", stream)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    h = _splitmix64(_splitmix64(seed) ^ prompt_index)
    h = _splitmix64(h ^ sample_index)
    return _splitmix64(h ^ stream) >> 1


def sample_generator(seed: int, prompt_index: int, sample_index: int, stream: int) -> torch.Generator:
    """CPU torch.Generator for one sample's stream (draws happen on CPU so every device agrees)."""
    g = torch.Generator(device="cpu")
    g.manual_seed(sample_seed(seed, prompt_index, sample_index, stream))
    return g
