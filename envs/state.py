"""The training envs' state for a checkpoint, mid-episode.

A sync vector env pickles with its wrappers' state (step counters, autoreset flags), but a MuJoCo
env does not: gymnasium pickles it by rebuilding it from its constructor arguments, so the
physics comes back at its initial pose and its RNG unseeded. So each MuJoCo sub-env's simulator
data (all of MjData: state, warm start, controls and the quantities derived from them) and its RNG
are saved beside the pickle and copied back into the rebuilt env. Async envs live in
subprocesses and are not saved (resume resets them)."""
from __future__ import annotations

import pickle

import numpy as np

_FORMAT = "tfrl-envs-1"


def _mujoco_state(env) -> dict | None:
    """Simulator and RNG state of a MuJoCo env (None for any other env)."""
    u = env.unwrapped
    data = getattr(u, "data", None)
    if data is None or type(data).__name__ != "MjData":
        return None
    rng = getattr(u, "_np_random", None)
    return {"data": data, "rng": None if rng is None else rng.bit_generator.state,
            "rng_seed": getattr(u, "_np_random_seed", None)}


def _set_mujoco_state(env, state: dict) -> None:
    import mujoco

    u = env.unwrapped
    # all of MjData, derived quantities too: an env may read them before its next mj_step
    # (Ant's reward takes the torso's xpos before stepping)
    mujoco.mj_copyData(u.data, u.model, state["data"])
    if state["rng"] is not None:
        rng = np.random.Generator(getattr(np.random, state["rng"]["bit_generator"])())
        rng.bit_generator.state = state["rng"]
        u._np_random, u._np_random_seed = rng, state["rng_seed"]


def _sub_envs(envs) -> list:
    """The sub-envs of a sync vector env under its wrappers ([] for an async one)."""
    return list(getattr(getattr(envs, "unwrapped", envs), "envs", None) or [])


def dump_envs(envs) -> bytes | None:
    """The vector env as bytes, or None when it cannot be saved (async: its envs are subprocesses)."""
    try:
        return pickle.dumps({"format": _FORMAT, "envs": envs,
                             "mujoco": [_mujoco_state(e) for e in _sub_envs(envs)]})
    except Exception:
        return None


def load_envs(blob: bytes):
    """The vector env `dump_envs` saved, every sub-env in the state it was in (a checkpoint from
    before this format holds the bare pickle)."""
    saved = pickle.loads(blob)
    if not (isinstance(saved, dict) and saved.get("format") == _FORMAT):
        return saved
    envs = saved["envs"]
    for env, state in zip(_sub_envs(envs), saved["mujoco"], strict=True):
        if state is not None:
            _set_mujoco_state(env, state)
    return envs
