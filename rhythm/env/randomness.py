"""Counter-based randomness: every random number in the env is a pure function of integers.

A value is ``splitmix64`` of (episode key, stream, index), so an episode's profile, start meters and
noise at step ``t`` can be computed for any number of episodes at once, in any order, with integer
arithmetic only. That is what makes trajectories bit-identical across processes, machines, numpy
builds, and between the scalar and the batched env. Gaussian-shaped noise is the standardised sum of
four 16-bit uniforms taken from one 64-bit hash (Irwin-Hall of order 4): no ``log``/``cos``, whose
last bits differ between platforms.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_SALT = 0x5259_5448_4D31  # "RYTHM1": changing it changes every episode (bump ENV_VERSION).
_IH_SCALE = 3.0**0.5  # sqrt(3): Irwin-Hall(4) has variance 1/3.

# Streams: what a random number is for. Indices inside a stream are documented where used.
STREAM_PROFILE = 1
STREAM_START = 2
STREAM_NOISE = 3
STREAM_PLAN = 4
FUTURE_SALT = 0xD1CE
"""Redrawn futures (:func:`future_keys`): draw ``d`` of an episode is keyed by ``splitmix64(key ^ (FUTURE_SALT + d))``."""


def splitmix64(x: int) -> int:
    """SplitMix64 finaliser on a Python int (mod 2**64)."""
    x = (x + _GOLDEN) & MASK64
    x = ((x ^ (x >> 30)) * _MUL1) & MASK64
    x = ((x ^ (x >> 27)) * _MUL2) & MASK64
    return x ^ (x >> 31)


def splitmix64_np(x: np.ndarray) -> np.ndarray:
    """SplitMix64 on a uint64 array; wraps mod 2**64 exactly like :func:`splitmix64`."""
    x = x.astype(np.uint64, copy=True)
    x += np.uint64(_GOLDEN)
    x ^= x >> np.uint64(30)
    x *= np.uint64(_MUL1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(_MUL2)
    x ^= x >> np.uint64(31)
    return x


def episode_key(condition_id: int, split_id: int, seed: int) -> int:
    """The 64-bit key of one episode: everything random in it derives from this."""
    k = splitmix64(_SALT ^ condition_id)
    k = splitmix64(k ^ split_id)
    return splitmix64(k ^ (seed & MASK64))


def episode_keys(condition_id: int, split_id: int, seeds: np.ndarray) -> np.ndarray:
    """Vectorised :func:`episode_key` for many seeds."""
    k = splitmix64(splitmix64(_SALT ^ condition_id) ^ split_id)
    return splitmix64_np(np.uint64(k) ^ np.asarray(seeds, dtype=np.uint64))


def future_keys(keys: np.ndarray, draw: int | np.ndarray) -> np.ndarray:
    """Keys of another future of the same episodes (``draw`` >= 1, one for all or one per episode): the same person
    and past, other luck. Only the noise is read from them (:class:`rhythm.env.batched.BatchedRhythmEnv`'s ``future``
    option)."""
    draws = np.asarray(draw, dtype=np.int64)
    if (draws < 1).any():
        raise ValueError(f"a redrawn future is draw 1 or later (0 is the episode's own), got {draw}")
    return splitmix64_np(np.asarray(keys, dtype=np.uint64) ^ (np.uint64(FUTURE_SALT) + draws.astype(np.uint64)))


def _stream_base(stream: int, index: int) -> int:
    return splitmix64((stream << 32) ^ index)


def uniform(key: int, stream: int, index: int) -> float:
    """One uniform in [0, 1) for (key, stream, index)."""
    return (splitmix64(key ^ _stream_base(stream, index)) >> 11) * (1.0 / 9007199254740992.0)


def uniform_np(keys: np.ndarray, stream: int, index: int) -> np.ndarray:
    """Uniforms in [0, 1) for many keys at one (stream, index); equals :func:`uniform` bit for bit."""
    h = splitmix64_np(keys ^ np.uint64(_stream_base(stream, index)))
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _irwin_hall(h: int) -> float:
    a = (h & 0xFFFF) + 0.5
    b = ((h >> 16) & 0xFFFF) + 0.5
    c = ((h >> 32) & 0xFFFF) + 0.5
    d = ((h >> 48) & 0xFFFF) + 0.5
    return ((a + b + c + d) * (1.0 / 65536.0) - 2.0) * _IH_SCALE


def normal(key: int, stream: int, index: int) -> float:
    """A standardised, Gaussian-shaped number (mean 0, sd 1, bounded by +-3.46)."""
    return _irwin_hall(splitmix64(key ^ _stream_base(stream, index)))


def stream_bases(stream: int, count: int) -> tuple[int, ...]:
    """Precomputed bases of indices ``0..count-1`` of a stream, for :func:`normal_at`."""
    return tuple(_stream_base(stream, i) for i in range(count))


def normal_at(key: int, base: int) -> float:
    """:func:`normal` with its stream base already computed (the scalar env's hot path)."""
    return _irwin_hall(splitmix64(key ^ base))


def normal_np(keys: np.ndarray, stream: int, index: int) -> np.ndarray:
    """Vectorised :func:`normal`; equal bit for bit."""
    return _irwin_hall_np(splitmix64_np(keys ^ np.uint64(_stream_base(stream, index))))


def normals_np(keys: np.ndarray, stream: int, indices: range) -> np.ndarray:
    """``(len(keys), len(indices))`` of :func:`normal`, one hash pass for all columns."""
    bases = np.array([_stream_base(stream, i) for i in indices], dtype=np.uint64)
    return _irwin_hall_np(splitmix64_np(np.asarray(keys, dtype=np.uint64)[:, None] ^ bases[None, :]))


def _irwin_hall_np(h: np.ndarray) -> np.ndarray:
    m = np.uint64(0xFFFF)
    a = (h & m).astype(np.float64) + 0.5
    b = ((h >> np.uint64(16)) & m).astype(np.float64) + 0.5
    c = ((h >> np.uint64(32)) & m).astype(np.float64) + 0.5
    d = ((h >> np.uint64(48)) & m).astype(np.float64) + 0.5
    return ((a + b + c + d) * (1.0 / 65536.0) - 2.0) * _IH_SCALE
