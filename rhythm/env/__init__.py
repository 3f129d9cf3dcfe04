"""The RhythmEnv benchmark: a week of a hidden person, as a Gymnasium env and a batched numpy env.

See :mod:`rhythm.env.rhythm_env` for the full specification (its docstring is the spec). Importing this
package registers the Gymnasium id :data:`ENV_ID` (``rhythm/RhythmEnv-v1``; :mod:`rhythm.env.registration`).
"""

from rhythm.env.batched import BatchedRhythmEnv, BatchState
from rhythm.env.constants import (
    ACTION_INDEX,
    ACTIONS,
    BELIEF_DIMS,
    CONDITIONS,
    DISCRETE_PROFILES,
    ENV_VERSION,
    EPISODE_STEPS,
    METERS,
    SLOTS,
    SPLITS,
)
from rhythm.env.profiles import FACTOR_NAMES, FACTORS, belief_of, sample_profiles
from rhythm.env.registration import ENV_ID, register_envs
from rhythm.env.rhythm_env import RhythmEnv

register_envs()

__all__ = [
    "ACTIONS",
    "ACTION_INDEX",
    "BELIEF_DIMS",
    "BatchState",
    "BatchedRhythmEnv",
    "CONDITIONS",
    "DISCRETE_PROFILES",
    "ENV_ID",
    "ENV_VERSION",
    "EPISODE_STEPS",
    "FACTORS",
    "FACTOR_NAMES",
    "METERS",
    "RhythmEnv",
    "SLOTS",
    "SPLITS",
    "belief_of",
    "sample_profiles",
]
