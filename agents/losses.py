"""Pure TensorFlow functions for the maths of the updates. No state, no Keras models."""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def scale_action(squashed: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """Map a tanh output in [-1, 1] onto the box [low, high]."""
    return low + (squashed + 1.0) * 0.5 * (high - low)


def td_target(reward: tf.Tensor, discount: tf.Tensor, next_value: tf.Tensor) -> tf.Tensor:
    """One-step (or n-step, via discount = gamma**n * (1 - terminated)) bootstrapped target."""
    return tf.stop_gradient(reward + discount * next_value)


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


def soft_update(target_vars, online_vars, tau: float) -> None:
    """Polyak averaging: target <- tau * online + (1 - tau) * target."""
    for t, o in zip(target_vars, online_vars, strict=True):
        t.assign(tau * o + (1.0 - tau) * t)


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's SAC bounds on the policy's log standard deviation


def bounded_log_std(raw):
    """The policy head's raw output squashed into [LOG_STD_MIN, LOG_STD_MAX] (CleanRL's SAC); a
    tensor, or a numpy array for acting."""
    tanh = np.tanh if isinstance(raw, np.ndarray) else tf.tanh
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (tanh(raw) + 1.0)


CLIP_LOG_STD_MIN = -20.0  # SB3's (and sb3-contrib's CrossQ's) clamp on the log std: [-20, 2]


def clipped_log_std(raw):
    """The policy head's raw output clamped to [CLIP_LOG_STD_MIN, LOG_STD_MAX] (SB3's SAC, sb3-contrib's
    CrossQ); a tensor, or a numpy array for acting."""
    if isinstance(raw, np.ndarray):
        return np.clip(raw, CLIP_LOG_STD_MIN, LOG_STD_MAX)
    return tf.clip_by_value(raw, CLIP_LOG_STD_MIN, LOG_STD_MAX)


LOG_STD_MAPS = {"tanh": bounded_log_std, "clip": clipped_log_std}


TANH_EPSILON = 1e-6  # SB3's, sb3-contrib's, CleanRL's and the SAC authors' first code's


def squashed_gaussian(mean: tf.Tensor, log_std: tf.Tensor, noise: tf.Tensor,
                      epsilon: float = TANH_EPSILON) -> tuple[tf.Tensor, tf.Tensor]:
    """A reparameterised sample a = tanh(mean + std * noise) in [-1, 1] and its log density,
    summed over the action dimensions: the Gaussian's log density of u = mean + std * noise minus
    log |d tanh(u) / du|. With `epsilon` > 0 that is the reference code's log(1 - a^2 + epsilon)
    (SB3, sb3-contrib, CleanRL; here without float32's cancellation in 1 - a^2), which floors the
    correction near log(epsilon) per dimension: where a saturates (|u| > 7 or so), its gradient all
    but stops pulling u back towards 0. With 0 it
    is the exact log(1 - tanh(u)^2), as 2 * (log 2 - u - softplus(-2u)), finite where tanh(u)
    rounds to +-1, whose gradient pulls a saturated u back by 2 tanh(u) however far out it is."""
    u = mean + tf.exp(log_std) * noise
    gaussian = -0.5 * tf.square(noise) - log_std - 0.5 * tf.math.log(2.0 * np.pi)
    log_det = 2.0 * (tf.math.log(2.0) - u - tf.nn.softplus(-2.0 * u))
    if epsilon:
        # log(1 - a^2 + eps) with 1 - a^2 as exp(log_det): in float32, 1 - tanh(u)^2 cancels to
        # rounding noise from |u| ~ 4 on, which eager and graph round apart
        log_det = tf.math.log(tf.exp(log_det) + epsilon)
    return tf.tanh(u), tf.reduce_sum(gaussian - log_det, axis=-1)


def soft_value(next_q: tf.Tensor, alpha: tf.Tensor, next_log_prob: tf.Tensor) -> tf.Tensor:
    """SAC's soft value of the next state: Q'(s', a') - alpha * log pi(a'|s')."""
    return next_q - alpha * next_log_prob


def sac_actor_loss(alpha: tf.Tensor, log_prob: tf.Tensor, q: tf.Tensor) -> tf.Tensor:
    """E[alpha * log pi(a|s) - min(Q1, Q2)(s, a)], a ~ pi(.|s) reparameterised."""
    return tf.reduce_mean(alpha * log_prob - q)


def temperature_loss(log_alpha: tf.Tensor, log_prob: tf.Tensor, target_entropy: float) -> tf.Tensor:
    """The temperature's loss: -log_alpha * (log pi + target_entropy), the policy's log density held
    fixed (SB3's and softlearning's form, on log alpha)."""
    return -tf.reduce_mean(log_alpha * tf.stop_gradient(log_prob + target_entropy))


def lap_huber(td_abs: tf.Tensor, min_priority: float = 1.0) -> tf.Tensor:
    """LAP's critic loss (sfujim/TD7 `LAP_huber`): per element 0.5 * x**2 below `min_priority`,
    min_priority * x from there (not a Huber loss's min_priority * (x - min_priority / 2): the
    gradients agree, the values do not), summed over the critics' columns, averaged over the batch."""
    per_element = tf.where(td_abs < min_priority, 0.5 * tf.square(td_abs), min_priority * td_abs)
    return tf.reduce_mean(tf.reduce_sum(per_element, axis=-1))


def squared_td(td_abs: tf.Tensor, weight: tf.Tensor | None = None) -> tf.Tensor:
    """The critics' squared TD errors summed over their columns, averaged over the batch: TD3's
    mse(Q1, y) + mse(Q2, y) for a (B, 2) array of |TD errors|; `weight` scales each sample's term
    (prioritized replay's importance weights)."""
    per_sample = tf.reduce_sum(tf.square(td_abs), axis=-1)
    return tf.reduce_mean(per_sample if weight is None else weight * per_sample)
