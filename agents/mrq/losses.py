"""MR.Q's maths (Fujimoto et al. 2025; facebookresearch/MRQ's `MRQ.py`): the reward's two-hot
encoding in symlog space, the encoder's unrolled model loss, the value target in reward-scale units,
the Gumbel-softmax of discrete policies. Pure functions of tensors."""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def symexp(x):
    """sign(x) * (exp(|x|) - 1), the inverse of symlog; numpy in, numpy out."""
    return np.sign(x) * np.expm1(np.abs(x))


def two_hot_bins(lower: float = -10.0, upper: float = 10.0, num_bins: int = 65) -> np.ndarray:
    """MR.Q's reward bins: `num_bins` points evenly spaced in symlog space from `lower` to `upper`,
    mapped back by symexp (so dense near zero, about +-22026 at the ends for +-10)."""
    return symexp(np.linspace(lower, upper, num_bins, dtype=np.float64)).astype(np.float32)


def two_hot(x: tf.Tensor, bins: tf.Tensor) -> tf.Tensor:
    """Each value of `x` (B,) as weights on its two neighbouring bins (B, num_bins), linear in
    between, so that weights . bins == x; a value on a bin is one-hot on it. Values beyond the end
    bins are put on the end bin (the author's code divides by zero there; no reward reaches
    symexp(10))."""
    x = tf.reshape(tf.cast(x, tf.float32), [-1])
    n = tf.shape(bins)[0]
    low = tf.clip_by_value(tf.searchsorted(bins, x, side="right") - 1, 0, n - 2)
    lower, upper = tf.gather(bins, low), tf.gather(bins, low + 1)
    w = tf.clip_by_value((x - lower) / (upper - lower), 0.0, 1.0)
    return tf.one_hot(low, n) * (1.0 - w)[:, None] + tf.one_hot(low + 1, n) * w[:, None]


def two_hot_mean(logits: tf.Tensor, bins: tf.Tensor) -> tf.Tensor:
    """The value a two-hot head predicts: its softmax's expectation over the bins, (B,)."""
    return tf.reduce_sum(tf.nn.softmax(logits, axis=-1) * bins, axis=-1)


def two_hot_cross_entropy(logits: tf.Tensor, target: tf.Tensor, bins: tf.Tensor) -> tf.Tensor:
    """Cross-entropy of the head's softmax against the target's two-hot encoding, per sample (B,)."""
    return -tf.reduce_sum(two_hot(target, bins) * tf.nn.log_softmax(logits, axis=-1), axis=-1)


def reward_squared_error(prediction: tf.Tensor, target: tf.Tensor, bins: tf.Tensor | None = None) -> tf.Tensor:
    """The squared error of a one-output reward head, per sample (B,): MR.Q's design study's "MSE
    reward loss" in place of `two_hot_cross_entropy` (same signature; `bins` unused)."""
    return tf.square(prediction[:, 0] - tf.cast(target, tf.float32))


def masked_mse(prediction: tf.Tensor, target: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Mean of the squared errors with each sample's row scaled by its mask (1: kept, 0: dropped),
    averaged over every element, dropped ones included (MR.Q's `masked_mse`)."""
    return tf.reduce_mean(tf.square(prediction - target) * tf.reshape(mask, [-1, 1]))


def scaled_value_target(reward: tf.Tensor, discount: tf.Tensor, next_value: tf.Tensor, reward_scale: tf.Tensor,
                        target_reward_scale: tf.Tensor) -> tf.Tensor:
    """MR.Q's value target in units of the buffer's mean absolute reward: the target network's
    values are in the units of its time (`target_reward_scale`), the online ones in today's
    (`reward_scale`): (R + discount * Q' * target_scale) / scale, with R and discount the buffer's
    n-step return and gamma^m (1 - terminated)."""
    return tf.stop_gradient((reward + discount * next_value * target_reward_scale) / reward_scale)


def gumbel_softmax(logits: tf.Tensor, uniform: tf.Tensor, tau: float) -> tf.Tensor:
    """softmax((logits + g) / tau) with g = -log(-log(u)) Gumbel noise from uniform draws in (0, 1)
    (PyTorch's F.gumbel_softmax without `hard`)."""
    return tf.nn.softmax((logits - tf.math.log(-tf.math.log(uniform))) / tau, axis=-1)


def realigned_action(action: tf.Tensor, discrete: bool) -> tf.Tensor:
    """A policy's action as the value network takes it: one-hot of its largest entry for discrete
    actions, clipped to [-1, 1] for continuous ones (MR.Q's `realign`)."""
    if discrete:
        return tf.one_hot(tf.argmax(action, axis=-1), tf.shape(action)[-1])
    return tf.clip_by_value(action, -1.0, 1.0)


def info_nce(predicted: tf.Tensor, target: tf.Tensor, temperature: float) -> tf.Tensor:
    """DR.Q's contrastive term, per sample (B,): each predicted embedding against every target one
    of the batch, both L2-normalized, cosine similarities over `temperature` as logits (B, B), the
    cross-entropy of its own row's target (the diagonal); one direction, in-batch negatives
    (DR.Q's `mutual_information_loss`; F.normalize's 1e-12 floor on the norm is 1e-24 on its square)."""
    predicted = tf.math.l2_normalize(predicted, axis=1, epsilon=1e-24)
    target = tf.math.l2_normalize(target, axis=1, epsilon=1e-24)
    logits = tf.matmul(predicted, target, transpose_b=True) / temperature
    return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.range(tf.shape(logits)[0]), logits)


def model_rollout_loss(model, zs: tf.Tensor, actions: tf.Tensor, next_zs: tf.Tensor, reward: tf.Tensor,
                       terminated: tf.Tensor, bins: tf.Tensor, dyn_weight: float, reward_weight: float,
                       done_weight: tf.Tensor, reward_loss=two_hot_cross_entropy, infonce_weight: float = 0.0,
                       infonce_temperature: float = 0.1) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """MR.Q's encoder loss: `model(zs, action) -> (done, next zs, reward logits)` unrolled from the
    first state's embedding `zs` (B, Z) through the H actions (B, H, A), each step's prediction fed
    to the next, against the target encoder's embeddings of the next states (B, H, Z), the rewards
    (two-hot cross-entropy) and the terminations (squared error of the raw output), every term of a
    sample masked from the step after its first termination on. Summed over the steps; `done_weight`
    is 0 while no stored transition has terminated (the author's `env_terminates`). `reward_loss`
    (logits, target, bins) -> (B,) is the reward's term. With `infonce_weight` (DR.Q), each step's
    predicted embedding is also contrasted with the batch's next-state embeddings (`info_nce`),
    masked as DR.Q's code masks it: the batch's mean times the share of samples still alive, not per
    sample (its (B,) loss times a (B, 1) mask, averaged). `parts` holds each term in play, unweighted."""
    alive = tf.ones_like(reward[:, 0])
    parts = {"dynamics": 0.0, "reward": 0.0, "done": 0.0} | ({"infonce": 0.0} if infonce_weight else {})
    for i in range(actions.shape[1]):
        done, zs, reward_logits = model(zs, actions[:, i])
        parts["dynamics"] += masked_mse(zs, next_zs[:, i], alive)
        parts["reward"] += tf.reduce_mean(reward_loss(reward_logits, reward[:, i], bins) * alive)
        parts["done"] += masked_mse(done, terminated[:, i, None], alive)
        if infonce_weight:
            parts["infonce"] += tf.reduce_mean(info_nce(zs, next_zs[:, i], infonce_temperature)) * tf.reduce_mean(alive)
        alive = alive * (1.0 - terminated[:, i])
    total = (dyn_weight * parts["dynamics"] + reward_weight * parts["reward"] + done_weight * parts["done"]
             + infonce_weight * parts.get("infonce", 0.0))
    return total, parts
