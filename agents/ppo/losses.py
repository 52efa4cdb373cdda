"""PPO's maths in TensorFlow, pure functions on tensors (CleanRL's ppo_continuous_action.py, ppo.py and
ppo_atari.py, lines as in docs/algorithms.md): the policy's log-densities and entropies, the
clipped surrogate, the value loss with or without clipping, and the debug statistics."""
from __future__ import annotations

import math

import tensorflow as tf

LOG_2PI = math.log(2.0 * math.pi)


def gaussian_log_prob(mean: tf.Tensor, log_std: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
    """log N(action; mean, exp(log_std)^2), summed over the action's dimensions."""
    z = (action - mean) * tf.exp(-log_std)
    return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * LOG_2PI, axis=-1)


def gaussian_entropy(log_std: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
    """The diagonal Gaussian's entropy, summed over dimensions, for each of `batch` rows (the
    log-std is state-independent, so every row has the same)."""
    per_row = tf.reduce_sum(0.5 + 0.5 * LOG_2PI + log_std)
    return tf.fill([batch], per_row)


def categorical_log_prob(logits: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
    log_p = tf.nn.log_softmax(logits)
    return tf.gather(log_p, tf.cast(action, tf.int32), axis=1, batch_dims=1)


def categorical_entropy(logits: tf.Tensor) -> tf.Tensor:
    log_p = tf.nn.log_softmax(logits)
    return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)


def normalized(advantages: tf.Tensor) -> tf.Tensor:
    """(A - mean) / (std + 1e-8) over the minibatch, with the unbiased std as torch's `std()`."""
    n = tf.cast(tf.size(advantages), advantages.dtype)
    mean = tf.reduce_mean(advantages)
    std = tf.sqrt(tf.reduce_sum(tf.square(advantages - mean)) / (n - 1.0))
    return (advantages - mean) / (std + 1e-8)


def clipped_surrogate(log_ratio: tf.Tensor, advantages: tf.Tensor, clip: float) -> tf.Tensor:
    """The policy loss: mean of max(-A r, -A clip(r, 1 - clip, 1 + clip)), r = exp(log_ratio)."""
    ratio = tf.exp(log_ratio)
    return tf.reduce_mean(tf.maximum(-advantages * ratio, -advantages * tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip)))


def value_loss(value: tf.Tensor, old_value: tf.Tensor, returns: tf.Tensor, clip: float | None) -> tf.Tensor:
    """0.5 * mean squared error to the returns; with `clip`, CleanRL's (and baselines') pessimistic
    form: the larger of the plain error and that of the value kept within `clip` of the old one."""
    unclipped = tf.square(value - returns)
    if clip is None:
        return 0.5 * tf.reduce_mean(unclipped)
    kept = old_value + tf.clip_by_value(value - old_value, -clip, clip)
    return 0.5 * tf.reduce_mean(tf.maximum(unclipped, tf.square(kept - returns)))


def approx_kl(log_ratio: tf.Tensor) -> tf.Tensor:
    """KL(old || new) by the k3 estimator: mean of (r - 1) - log r (Schulman's; CleanRL's approx_kl)."""
    return tf.reduce_mean(tf.exp(log_ratio) - 1.0 - log_ratio)


def clip_fraction(log_ratio: tf.Tensor, clip: float) -> tf.Tensor:
    return tf.reduce_mean(tf.cast(tf.abs(tf.exp(log_ratio) - 1.0) > clip, tf.float32))
