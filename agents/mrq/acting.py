"""MR.Q's actions from its policy's pre-activation: in numpy for acting (the author's `select_action`),
in TensorFlow for export."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from agents.base import ActionBox
from agents.losses import scale_action


def gumbel_argmax(pre: np.ndarray, tau: float, rng: np.random.Generator, noise: float | None) -> np.ndarray:
    """Discrete: the largest entry of the Gumbel-softmax, a sample of softmax(pre-activation) (in
    evaluation too), plus Gaussian noise of std `noise` before the argmax when exploring."""
    gumbel = -np.log(-np.log(rng.uniform(1e-20, 1.0, pre.shape)))
    action = (pre + gumbel) / tau
    action = np.exp(action - action.max(axis=-1, keepdims=True))
    action /= action.sum(axis=-1, keepdims=True)
    if noise is not None:
        action = action + rng.normal(0.0, noise, action.shape)
    return action.argmax(axis=-1).astype(np.int64)


def tanh_action(pre: np.ndarray, box: ActionBox, rng: np.random.Generator, noise: float | None) -> np.ndarray:
    """Continuous: tanh of the pre-activation, plus Gaussian noise of std `noise` clipped to [-1, 1]
    when exploring, in the env's units."""
    action = np.tanh(pre)
    if noise is not None:
        action = np.clip(action + rng.normal(0.0, noise, action.shape), -1.0, 1.0)
    return box.from_unit(action).astype(np.float32)


def deterministic(pre: tf.Tensor, box: ActionBox | None) -> tf.Tensor:
    """For export: the most likely discrete action (`box` None), or tanh in the env's units."""
    if box is None:
        return tf.argmax(pre, axis=-1, output_type=tf.int32)
    return scale_action(tf.tanh(pre), box.low, box.high)
