"""Gymnasium ids of the benchmark, so RL libraries that start from ``gymnasium.make`` find the env.

``import rhythm`` registers ``rhythm/RhythmEnv-v<N>``, ``N`` being the number in ``ENV_VERSION``, so an id
names the dynamics its results came from. ``gymnasium.make`` gives :class:`RhythmEnv` and
``gymnasium.make_vec`` the batched :class:`BatchedRhythmEnv` (its ``vector_entry_point``); both take
``condition``, ``split`` and ``seed`` keyword arguments. Gymnasium 1.x no longer loads plugins from
package entry points, so a fresh interpreter that does not ``import rhythm`` names the module in the id
instead: ``gymnasium.make("rhythm:rhythm/RhythmEnv-v1")``.
"""

from __future__ import annotations

import gymnasium

from rhythm.env.constants import ENV_VERSION

ENV_ID = f"rhythm/RhythmEnv-v{ENV_VERSION.rsplit('-v', 1)[1]}"


def register_envs() -> None:
    """Register :data:`ENV_ID` with Gymnasium (once; a second call changes nothing)."""
    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="rhythm.env.rhythm_env:RhythmEnv",
        vector_entry_point="rhythm.env.batched:BatchedRhythmEnv",
    )
