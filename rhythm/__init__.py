"""rhythm: teach small language models to infer hidden structure and act on it.

Importing the package registers the benchmark's Gymnasium id, so ``gymnasium.make("rhythm/RhythmEnv-v1")``
works after ``import rhythm`` (see :mod:`rhythm.env.registration`).
"""

import rhythm.env  # noqa: F401  (registers the Gymnasium ids)
