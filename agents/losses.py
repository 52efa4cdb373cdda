"""Pure TensorFlow functions for the maths of the updates. No state, no Keras models."""
from __future__ import annotations

import tensorflow as tf


def scale_action(squashed: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """Map a tanh output in [-1, 1] onto the box [low, high]."""
    return low + (squashed + 1.0) * 0.5 * (high - low)


def smoothed_target_action(
    target_action: tf.Tensor,
    noise: tf.Tensor,
    noise_clip: float,
    half_range: tf.Tensor,
    low: tf.Tensor,
    high: tf.Tensor,
) -> tf.Tensor:
    """TD3 target policy smoothing: a' = clip(pi'(s') + clip(noise, -c, c), low, high).

    `noise` is already scaled (std * half_range); the clip `c` is scaled by the action half-range,
    as sfujim/TD3 scales both by max_action.
    """
    clipped = tf.clip_by_value(noise, -noise_clip * half_range, noise_clip * half_range)
    return tf.clip_by_value(target_action + clipped, low, high)


def td_target(reward: tf.Tensor, discount: tf.Tensor, next_value: tf.Tensor) -> tf.Tensor:
    """One-step (or n-step, via discount = gamma**n * (1 - terminated)) bootstrapped target."""
    return tf.stop_gradient(reward + discount * next_value)


def clipped_double_q(q1: tf.Tensor, q2: tf.Tensor) -> tf.Tensor:
    """TD3's pessimistic estimate: the smaller of the two target critics."""
    return tf.minimum(q1, q2)


def mse(prediction: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.square(prediction - target))


def td3_critic_loss(q1: tf.Tensor, q2: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """Sum of the two critics' mean squared TD errors (sfujim/TD3: mse(Q1, y) + mse(Q2, y))."""
    return mse(q1, target) + mse(q2, target)


def deterministic_actor_loss(q: tf.Tensor) -> tf.Tensor:
    """Deterministic policy gradient objective: maximise Q(s, pi(s)), i.e. minimise its negative mean."""
    return -tf.reduce_mean(q)


def soft_update(target_vars, online_vars, tau: float) -> None:
    """Polyak averaging: target <- tau * online + (1 - tau) * target."""
    for t, o in zip(target_vars, online_vars, strict=True):
        t.assign(tau * o + (1.0 - tau) * t)
