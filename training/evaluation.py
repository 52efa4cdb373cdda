"""Evaluation: deterministic episodes of a policy (`evaluate`), the one evaluation of the loops,
evaluate.py (training/evaluate_run.py) and benchmarks/sb3_learning.py. The module imports no
TensorFlow, so that SB3's venv, which has none, evaluates its runs with the same code."""
from __future__ import annotations

from typing import Callable, Protocol

import gymnasium as gym
import numpy as np


def epsilon_greedy(policy: Callable[[np.ndarray], np.ndarray], space: gym.Space, epsilon: float,
                   seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """`policy` (one observation in, one action out), its action replaced by a uniform random one
    with probability `epsilon`: the evaluation protocol of the Atari papers (0.05 in Mnih et al.
    2015), where a greedy policy can stand still for ever (Breakout waits for FIRE after a lost life)."""
    if not epsilon:
        return policy
    rng = np.random.default_rng([seed, 1])  # apart from the env's and the agent's generators

    def act(obs: np.ndarray) -> np.ndarray:
        action = policy(obs)
        return np.int64(rng.integers(space.n)) if rng.random() < epsilon else action

    return act


class Acts(Protocol):
    """What evaluation needs of a policy: actions for a batch of observations (the Agent protocol's
    `act`; sb3_learning.py adapts SB3's `predict` to it)."""

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...


def evaluate(agent: Acts, env: gym.Env, episodes: int, seed: int, epsilon: float = 0.0) -> dict[str, float]:
    """Deterministic episodes (no exploration noise). The first reset is seeded with `seed`, so
    every evaluation of a run starts from the same initial states. With `epsilon` (discrete
    actions), each action is a uniform random one with that probability, drawn from `seed` too."""
    returns, lengths, successes = [], [], []
    obs, _ = env.reset(seed=seed)
    policy = epsilon_greedy(lambda o: agent.act(o[None], explore=False)[0], env.action_space, epsilon, seed)
    for _ in range(episodes):
        done, ret, length, info = False, 0.0, 0, {}
        while not done:
            action = policy(obs)
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
