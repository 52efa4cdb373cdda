"""Checkpoints written before the plain-data format (2026-11-25) kept the run's state, the
training envs among it, as a pickle (`state.pkl`). Unpickling runs whatever code the file names,
so this is the one module that does it, and only for a resume whose user has said they trust the
run directory (`checkpoint.trust_pickle=true`); nothing else imports it."""
from __future__ import annotations

import os
import pickle

import numpy as np


def load_pickled_state(checkpoint: str) -> dict:
    """The state of an old checkpoint, its envs (saved as bytes) unpickled into a vector env."""
    with open(os.path.join(checkpoint, "state.pkl"), "rb") as f:
        state = pickle.load(f)
    if isinstance(state.get("envs"), bytes):
        state["envs"] = _envs(state["envs"])
    return state


def _envs(blob: bytes):
    """Format tfrl-envs-1 (each MuJoCo env's MjData and RNG beside the pickled vector env), or the
    bare pickle before it."""
    saved = pickle.loads(blob)
    if not (isinstance(saved, dict) and saved.get("format") == "tfrl-envs-1"):
        return saved
    envs = saved["envs"]
    subs = list(getattr(getattr(envs, "unwrapped", envs), "envs", None) or [])
    for env, state in zip(subs, saved["mujoco"], strict=True):
        if state is None:
            continue
        import mujoco

        u = env.unwrapped
        mujoco.mj_copyData(u.data, u.model, state["data"])
        if state["rng"] is not None:
            rng = np.random.Generator(getattr(np.random, state["rng"]["bit_generator"])())
            rng.bit_generator.state = state["rng"]
            u._np_random, u._np_random_seed = rng, state["rng_seed"]
    return envs
