"""Evaluation: deterministic episodes of a policy (`evaluate`), the one evaluation of the loops,
evaluate.py (training/evaluate_run.py) and benchmarks/sb3_learning.py. The module imports no
TensorFlow, so that SB3's venv, which has none, evaluates its runs with the same code."""
from __future__ import annotations

from typing import Protocol

import gymnasium as gym
import numpy as np


class Acts(Protocol):
    """What evaluation needs of a policy: actions for a batch of observations (the Agent protocol's
    `act`; sb3_learning.py adapts SB3's `predict` to it)."""

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...


def evaluate(agent: Acts, env: gym.Env, episodes: int, seed: int) -> dict[str, float]:
    """Deterministic episodes (no exploration noise). The first reset is seeded with `seed`, so
    every evaluation of a run starts from the same initial states."""
    returns, lengths, successes = [], [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        done, ret, length, info = False, 0.0, 0, {}
        while not done:
            action = agent.act(obs[None], explore=False)[0]
            obs, reward, terminated, truncated, info = env.step(action)
            ret += float(reward)
            length += 1
            done = terminated or truncated
        returns.append(ret)
        lengths.append(length)
        if "is_success" in info:  # gymnasium's convention for goal-reaching tasks
            successes.append(float(info["is_success"]))
        obs, _ = env.reset()
    r = np.asarray(returns)
    result = {
        "return_mean": float(r.mean()),
        "return_std": float(r.std()),
        "return_min": float(r.min()),
        "return_max": float(r.max()),
        "length_mean": float(np.mean(lengths)),
    }
    if successes:
        result["success_rate"] = float(np.mean(successes))
    return result
