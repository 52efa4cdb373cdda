"""Observation normalization with running statistics (SimBa's RSNorm, Lee et al. 2025).

Every observation the agent acts on in training updates a running mean and variance (Chan et
al.'s parallel algorithm, in float64, as SimBa's `RunningMeanStd`); acting, the update's batches,
evaluation and the exported policy all see (obs - mean) / sqrt(var + eps) under the statistics of
that moment. The statistics live on the host in numpy, where the observations are, and travel in
the agent's TensorFlow checkpoint as Python state.
"""
from __future__ import annotations

import io

import numpy as np
import tensorflow as tf

EPSILON = 1e-8       # inside the square root, as SimBa's ObservationNormalizer
INITIAL_COUNT = 1e-4  # the prior's weight: mean 0, variance 1 until data outweighs it (SimBa, gymnasium)


def merged_moments(mean: np.ndarray, var: np.ndarray, count: float,
                   batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, (population) variance and count of two sets of samples from each one's moments."""
    delta = batch_mean - mean
    total = count + batch_count
    new_mean = mean + delta * (batch_count / total)
    m2 = var * count + batch_var * batch_count + np.square(delta) * (count * batch_count / total)
    return new_mean, m2 / total, total


def normalized(x: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float = EPSILON,
               clip: float | None = None) -> np.ndarray:
    out = (x - mean) / np.sqrt(var + epsilon)
    return (out if clip is None else np.clip(out, -clip, clip)).astype(np.float32)


class RunningNormalizer(tf.train.experimental.PythonState):
    """Running observation statistics and the normalization they define, its values clipped to
    [-clip, clip] when `clip` is set (CleanRL's and SB3's PPO: 10). A PythonState, so a
    `tf.train.Checkpoint` holding it saves and restores the statistics with the networks."""

    def __init__(self, obs_dim: int, clip: float | None = None):
        self.clip = clip
        self.mean = np.zeros(int(obs_dim), np.float64)
        self.var = np.ones(int(obs_dim), np.float64)
        self.count = INITIAL_COUNT

    def update(self, obs: np.ndarray) -> None:
        """Add a batch of observations [N, obs_dim] to the statistics."""
        obs = np.asarray(obs, np.float64).reshape(-1, self.mean.shape[0])
        self.mean, self.var, self.count = merged_moments(
            self.mean, self.var, self.count, obs.mean(axis=0), obs.var(axis=0), obs.shape[0])

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return normalized(np.asarray(obs), self.mean, self.var, clip=self.clip)

    def graph_fn(self):
        """The normalization under the statistics of now, as a TensorFlow function of a float32
        batch (for the exported policy): the same float64 arithmetic, so the same float32 values."""
        mean, std = tf.constant(self.mean), tf.constant(np.sqrt(self.var + EPSILON))
        clip = self.clip

        def normalize(obs):
            out = (tf.cast(obs, tf.float64) - mean) / std
            return tf.cast(out if clip is None else tf.clip_by_value(out, -clip, clip), tf.float32)

        return normalize

    # --- PythonState ----------------------------------------------------------------------
    def serialize(self) -> bytes:
        out = io.BytesIO()
        np.savez(out, mean=self.mean, var=self.var, count=np.float64(self.count))
        return out.getvalue()

    def deserialize(self, data: bytes) -> None:
        with np.load(io.BytesIO(data)) as saved:
            if saved["mean"].shape != self.mean.shape:
                raise ValueError(f"the checkpoint's observation statistics have shape {saved['mean'].shape}, "
                                 f"this agent's observations {self.mean.shape}")
            self.mean, self.var, self.count = saved["mean"].copy(), saved["var"].copy(), float(saved["count"])


class ReturnScaler(tf.train.experimental.PythonState):
    """Rewards divided by the running standard deviation of a discounted return, then clipped to
    [-clip, clip], as CleanRL's PPO on MuJoCo wraps each env (gymnasium's NormalizeReward, then a clip
    at 10): return = return * gamma * (1 - terminated) + r with this step's `terminated` (gymnasium keeps
    that order "for backward compatibility"), the statistics pooled over the envs (as gymnasium's
    vector wrapper and SB3's VecNormalize; CleanRL keeps one per env, the same with its one env).
    Checkpointed as Python state, the returns under way with it."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0):
        self.gamma, self.clip = float(gamma), float(clip)
        self.returns = np.zeros(int(num_envs), np.float64)
        self.stats = RunningNormalizer(1)

    def __call__(self, reward: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma * (1.0 - np.asarray(terminated, np.float64)) + reward
        self.stats.update(self.returns[:, None])
        scaled = np.asarray(reward, np.float64) / np.sqrt(self.stats.var[0] + EPSILON)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def serialize(self) -> bytes:
        out = io.BytesIO()
        np.savez(out, returns=self.returns, stats=np.frombuffer(self.stats.serialize(), np.uint8))
        return out.getvalue()

    def deserialize(self, data: bytes) -> None:
        with np.load(io.BytesIO(data)) as saved:
            if saved["returns"].shape != self.returns.shape:
                raise ValueError(f"the checkpoint's reward scaling follows {saved['returns'].shape[0]} envs, this run "
                                 f"has {self.returns.shape[0]}")
            self.returns = saved["returns"].copy()
            self.stats.deserialize(saved["stats"].tobytes())
