"""A particle posterior over the hidden profile, updated with the env's own likelihood.

Each episode carries ``particles`` profile hypotheses. After every step, a particle's weight is
multiplied by the likelihood of the observed meters under that profile: the env's noise-free change
(:func:`rhythm.env.dynamics.expected_delta`) plus Gaussian noise of the env's documented size, with
censoring where a meter was clipped at 0 or 1. When the effective sample size drops below a threshold,
particles are resampled (systematic) and jittered with Liu-West shrinkage so the cloud keeps covering
the posterior instead of collapsing onto a few points.

The prior is a mixture: mostly the training (in-dist) distribution, plus a share drawn uniformly over
every factor's full documented range, so people outside the training distribution (the ``ood`` and
``discrete`` conditions) stay reachable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
from annotated_types import Gt
from scipy.special import log_ndtr

from rhythm.config import Positive, Unit
from rhythm.env.constants import N_METERS, N_SLOTS
from rhythm.env.dynamics import NOISE_SIGMA, Params, expected_delta, make_params
from rhythm.env.profiles import FACTOR_HIGH, FACTOR_LOW, N_FACTORS, belief_of, sample_broad, sample_in_dist
from rhythm.env.randomness import normal_np, splitmix64_np, uniform_np

STREAM_PRIOR = 11
STREAM_RESAMPLE = 12
STREAM_JITTER = 13


@dataclass(frozen=True)
class PosteriorConfig:
    """Particle filter settings."""

    particles: Positive = 1000
    """Profile hypotheses per episode. 1000 keeps the belief's Monte Carlo error (~0.01) well below
    the inference error it reports, and an update costs ~0.2 ms."""
    prior_in_dist: Unit = 0.7
    """Share of prior particles from the training distribution; the rest are uniform (broad)."""
    ess_threshold: Unit = 0.5
    """Resample when the effective sample size falls below this fraction of the particles."""
    shrink: Unit = 0.95
    """Liu-West shrinkage a: jitter keeps the posterior's mean and variance."""
    noise_scale: Annotated[float, Gt(0)] = 1.2
    """Likelihood noise as a multiple of the env's sigma: slightly wider is robust to the env's
    Gaussian-shaped (bounded) noise and to particles that sit between true values."""


class ParticlePosterior:
    """Posteriors of E episodes at once: ``particles`` ``(E, P, F)``, log-weights ``(E, P)``."""

    def __init__(self, keys: np.ndarray, config: PosteriorConfig = PosteriorConfig()) -> None:
        self.config = config
        self.keys = np.asarray(keys, dtype=np.uint64)
        e, p = len(self.keys), config.particles
        pkeys = splitmix64_np(np.repeat(self.keys, p) ^ np.tile(np.arange(1, p + 1, dtype=np.uint64), e))
        pkeys = splitmix64_np(pkeys ^ np.uint64(STREAM_PRIOR))
        n_in = int(round(config.prior_in_dist * p))
        inside = np.tile(np.arange(p) < n_in, e)
        f = np.where(inside[:, None], sample_in_dist(pkeys), sample_broad(pkeys))
        self.particles = f.reshape(e, p, N_FACTORS)
        self.logw = np.zeros((e, p))
        self.params = make_params(f)
        self.resamples = np.zeros(e, dtype=np.int64)

    @property
    def weights(self) -> np.ndarray:
        w = np.exp(self.logw - self.logw.max(axis=1, keepdims=True))
        return w / w.sum(axis=1, keepdims=True)

    def update(self, t: int, before: np.ndarray, action: np.ndarray, after: np.ndarray) -> None:
        """Condition on one observed transition of every episode: ``before -> after`` under ``action``."""
        e, p = self.logw.shape
        m = np.repeat(before, p, axis=0)
        a = np.repeat(np.asarray(action, dtype=np.int64), p)
        mu = m + expected_delta(self.params, m, np.full(e * p, t % N_SLOTS), a)
        x = np.repeat(after, p, axis=0)
        sigma = NOISE_SIGMA * self.config.noise_scale
        z = (x - mu) / sigma
        ll = -0.5 * z * z
        # a meter clipped at 1 (or 0) says only that the unclipped value got there: the normal's tail mass
        top, bottom = x >= 1.0, x <= 0.0
        bottom &= ~top
        sd = np.broadcast_to(sigma, x.shape)  # per meter
        ll[top] = log_ndtr(-(1.0 - mu[top]) / sd[top])  # only where it applies: log_ndtr is half the update's time
        ll[bottom] = log_ndtr(-mu[bottom] / sd[bottom])
        self.logw += ll.sum(axis=1).reshape(e, p)
        self.logw -= self.logw.max(axis=1, keepdims=True)
        self._maybe_resample(t)

    def _maybe_resample(self, t: int) -> None:
        w = self.weights
        ess = 1.0 / (w * w).sum(axis=1)
        todo = np.flatnonzero(ess < self.config.ess_threshold * w.shape[1])
        if len(todo) == 0:
            return
        e, p, f = self.particles.shape
        u0 = uniform_np(self.keys[todo], STREAM_RESAMPLE, t)
        positions = (u0[:, None] + np.arange(p)[None, :]) / p
        idx = np.empty((len(todo), p), dtype=np.int64)
        for row, (i, pos) in enumerate(zip(todo, positions)):
            idx[row] = np.minimum(np.searchsorted(np.cumsum(w[i]), pos), p - 1)
        chosen = np.take_along_axis(self.particles[todo], idx[:, :, None], axis=1)
        mean = (w[todo, :, None] * self.particles[todo]).sum(axis=1, keepdims=True)
        var = (w[todo, :, None] * (self.particles[todo] - mean) ** 2).sum(axis=1, keepdims=True)
        a = self.config.shrink
        offsets = np.tile(np.arange(1, p * f + 1, dtype=np.uint64), len(todo))
        jkeys = splitmix64_np(np.repeat(self.keys[todo], p * f) ^ offsets)
        z = normal_np(jkeys, STREAM_JITTER, t).reshape(len(todo), p, f)
        new = a * chosen + (1 - a) * mean + np.sqrt(1 - a * a) * np.sqrt(var) * z
        new = np.clip(new, FACTOR_LOW, FACTOR_HIGH)
        self.particles[todo] = new
        self.logw[todo] = 0.0
        rows = (todo[:, None] * p + np.arange(p)[None, :]).ravel()
        fresh = make_params(new.reshape(-1, f))
        for name in Params.__dataclass_fields__:
            getattr(self.params, name)[rows] = getattr(fresh, name)
        self.resamples[todo] += 1

    def belief(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the belief (S, M, W): two ``(E, 3)`` arrays."""
        w = self.weights[:, :, None]
        b = belief_of(self.particles)
        mean = (w * b).sum(axis=1)
        std = np.sqrt((w * (b - mean[:, None, :]) ** 2).sum(axis=1))
        return mean, std

    def factor_mean(self) -> np.ndarray:
        return (self.weights[:, :, None] * self.particles).sum(axis=1)

    def sample(self, k: int, t: int) -> np.ndarray:
        """``k`` particle indices per episode, systematic draw from the weights: ``(E, k)``."""
        w = self.weights
        u0 = uniform_np(self.keys, STREAM_RESAMPLE, 1000 + t)
        pos = (u0[:, None] + np.arange(k)[None, :]) / k
        cw = np.cumsum(w, axis=1)
        return np.stack([np.minimum(np.searchsorted(cw[i], pos[i]), w.shape[1] - 1) for i in range(len(w))])


assert N_METERS == 5
