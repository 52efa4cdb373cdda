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


def normalized(x: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float = EPSILON) -> np.ndarray:
    return ((x - mean) / np.sqrt(var + epsilon)).astype(np.float32)


class RunningNormalizer(tf.train.experimental.PythonState):
    """Running observation statistics and the normalization they define. A PythonState, so a
    `tf.train.Checkpoint` holding it saves and restores the statistics with the networks."""

    def __init__(self, obs_dim: int):
        self.mean = np.zeros(int(obs_dim), np.float64)
        self.var = np.ones(int(obs_dim), np.float64)
        self.count = INITIAL_COUNT

    def update(self, obs: np.ndarray) -> None:
        """Add a batch of observations [N, obs_dim] to the statistics."""
        obs = np.asarray(obs, np.float64).reshape(-1, self.mean.shape[0])
        self.mean, self.var, self.count = merged_moments(
            self.mean, self.var, self.count, obs.mean(axis=0), obs.var(axis=0), obs.shape[0])

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return normalized(np.asarray(obs), self.mean, self.var)

    def graph_fn(self):
        """The normalization under the statistics of now, as a TensorFlow function of a float32
        batch (for the exported policy): the same float64 arithmetic, so the same float32 values."""
        mean, std = tf.constant(self.mean), tf.constant(np.sqrt(self.var + EPSILON))
        return lambda obs: tf.cast((tf.cast(obs, tf.float64) - mean) / std, tf.float32)

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
