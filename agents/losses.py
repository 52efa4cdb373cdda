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


def mse(prediction: tf.Tensor, target: tf.Tensor, weight: tf.Tensor | None = None) -> tf.Tensor:
    """Mean squared error; `weight` scales each sample's term (prioritized replay's IS weights)."""
    sq = tf.square(prediction - target)
    return tf.reduce_mean(sq if weight is None else weight * sq)


def huber(prediction: tf.Tensor, target: tf.Tensor, weight: tf.Tensor | None = None, delta: float = 1.0) -> tf.Tensor:
    """Mean Huber loss: quadratic within `delta` of the target, linear outside."""
    err = tf.abs(prediction - target)
    quad = tf.minimum(err, delta)
    per_sample = 0.5 * tf.square(quad) + delta * (err - quad)
    return tf.reduce_mean(per_sample if weight is None else weight * per_sample)


def td3_critic_loss(q1: tf.Tensor, q2: tf.Tensor, target: tf.Tensor, weight: tf.Tensor | None = None) -> tf.Tensor:
    """Sum of the two critics' mean squared TD errors (sfujim/TD3: mse(Q1, y) + mse(Q2, y))."""
    return mse(q1, target, weight) + mse(q2, target, weight)


def q_of_actions(q_values: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    """Q(s, a) for each row: picks column `actions[i]` of row i (tf.gather with batch_dims=1)."""
    return tf.gather(q_values, tf.cast(actions, tf.int32), axis=1, batch_dims=1)


def dqn_next_value(next_q_target: tf.Tensor, next_q_online: tf.Tensor | None) -> tf.Tensor:
    """Value of the next state for the DQN target. Plain DQN: max_a Q_target(s', a). Double DQN
    (van Hasselt et al. 2016), when `next_q_online` is given: Q_target(s', argmax_a Q_online(s', a))."""
    if next_q_online is None:
        return tf.reduce_max(next_q_target, axis=1)
    return q_of_actions(next_q_target, tf.argmax(next_q_online, axis=1, output_type=tf.int32))


def linear_schedule(start: float, end: float, duration: int, t):
    """Linear interpolation from `start` to `end` over `duration` steps, then `end`."""
    if duration <= 0:
        return end
    frac = min(max(float(t) / duration, 0.0), 1.0)
    return start + frac * (end - start)


def deterministic_actor_loss(q: tf.Tensor) -> tf.Tensor:
    """Deterministic policy gradient objective: maximise Q(s, pi(s)), i.e. minimise its negative mean."""
    return -tf.reduce_mean(q)


def soft_update(target_vars, online_vars, tau: float) -> None:
    """Polyak averaging: target <- tau * online + (1 - tau) * target."""
    for t, o in zip(target_vars, online_vars, strict=True):
        t.assign(tau * o + (1.0 - tau) * t)
