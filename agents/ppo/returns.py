"""What a rollout's learning targets are, in numpy: generalized advantage estimation (Schulman et
al. 2016) over a rollout of T steps of N envs, and the explained variance PPO logs."""
from __future__ import annotations

import numpy as np


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminated: np.ndarray, ended: np.ndarray,
        gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns (advantage + value) of T x N transitions.

    `values[t]` is V(s_t); `next_values[t]` is V(s_{t+1}) of the same episode (at a truncation, the
    value of the final observation); `terminated[t]` zeroes that bootstrap (a terminal state has no
    value); `ended[t]` (terminated or truncated) stops the sum of later TD errors from crossing into
    the next episode:
        delta_t = r_t + gamma (1 - terminated_t) V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma lam (1 - ended_t) A_{t+1},   A_T = 0.
    CleanRL's treatment of a time limit is terminated = ended (no bootstrap); SB3's, terminated
    alone with next_values holding V(final observation)."""
    rewards, values, next_values = (np.asarray(x, np.float64) for x in (rewards, values, next_values))
    keep = 1.0 - np.asarray(terminated, np.float64)
    carry = 1.0 - np.asarray(ended, np.float64)
    deltas = rewards + gamma * keep * next_values - values
    advantages = np.zeros_like(deltas)
    last = np.zeros(deltas.shape[1:])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = deltas[t] + gamma * lam * carry[t] * last
        advantages[t] = last
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


def explained_variance(predicted: np.ndarray, target: np.ndarray) -> float:
    """1 - Var(target - predicted) / Var(target); nan when the targets do not vary."""
    var = np.var(target)
    return float("nan") if var == 0 else float(1.0 - np.var(target - predicted) / var)
