"""SAC with a learned temperature (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications"), in the order of Stable-Baselines3's `SAC.train()`. The policy's raw log standard
deviation is clamped to [-20, 2] (`log_std=clip`, SB3's) or squashed into [-5, 2] by tanh
(`log_std=tanh`, CleanRL's).

Per update, with one reparameterised sample a ~ pi(.|s) of the batch's observations:
the temperature steps on -log_alpha * (log pi(a|s) + target_entropy); both critics regress onto
r + discount * (min(Q1', Q2')(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s'), on half the sum of
their mean squared errors (SB3's); the actor descends
alpha * log pi(a|s) - min(Q1, Q2)(s, a) on the critics after their step; the target critics move
by Polyak averaging. alpha is the temperature before its step, as in SB3. Log densities are of the
squashed action in [-1, 1] (SB3's; CleanRL's also count the scaling onto the env's box), so
`target_entropy=auto` is -|A| there. Evaluation and export act with tanh(mean).
"""
from __future__ import annotations

import math
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import checks, losses
from agents.base import check_tau, copy_of
from agents.optimizers import adam
from agents.deterministic import DeterministicActor
from agents.stochastic import SquashedGaussianActor
from buffers.types import Batch


def check_target_entropy(value, action_dim: int) -> float:
    if value == "auto":
        return -float(action_dim)
    return checks.number(value, "target_entropy", f"a number or auto (-|A| = {-action_dim})", lambda x: True)


class SAC(SquashedGaussianActor):
    def __init__(
        self,
        obs_shape: int | tuple[int, ...],
        action_low: np.ndarray,
        action_high: np.ndarray,
        network: Callable[..., keras.Model],
        rng: np.random.Generator,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        alpha_lr: float = 3e-4,
        tau: float = 0.005,
        init_alpha: float = 1.0,
        target_entropy: float | str = "auto",
        log_std: str = "clip",
        tanh_epsilon: float = losses.TANH_EPSILON,
    ):
        checks.choice(log_std, "log_std", sorted(losses.LOG_STD_MAPS),
                      " (clip: SB3's clamp to [-20, 2]; tanh: CleanRL's smooth bound into [-5, 2])")
        checks.number(init_alpha, "init_alpha", "a positive number (1.0 in SB3 and CleanRL)", lambda x: x > 0)
        super().__init__(obs_shape, action_low, action_high, network, rng, tanh_epsilon)
        self.log_std = losses.LOG_STD_MAPS[log_std]  # a plain function on the instance: tf or numpy in
        self.tau = check_tau(tau)
        self.target_entropy = check_target_entropy(target_entropy, self.action_dim)

        self.critic1, self.critic2 = self.critic_network(network, "critic1"), self.critic_network(network, "critic2")
        self.critic1_target = copy_of(self.critic1, self.critic_network(network, "critic1_target"))
        self.critic2_target = copy_of(self.critic2, self.critic_network(network, "critic2_target"))
        self.log_alpha = tf.Variable(math.log(init_alpha), dtype=tf.float32, name="log_alpha")
        self._critic_vars = self.critic1.trainable_variables + self.critic2.trainable_variables
        self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer = adam(actor_lr), adam(critic_lr), adam(alpha_lr)
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.critic_optimizer.build(self._critic_vars)
        self.alpha_optimizer.build([self.log_alpha])
        self._online = self.critic1.weights + self.critic2.weights
        self._targets = self.critic1_target.weights + self.critic2_target.weights
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")

    # --- the update -----------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        self.updates.assign_add(1)
        alpha = tf.exp(self.log_alpha)  # this update's temperature: the value before its own step
        with tf.GradientTape() as actor_tape:  # the sample the actor's loss differentiates, taken first (SB3)
            action, log_prob = self.sample(batch.obs)
        with tf.GradientTape() as tape:
            alpha_loss = losses.temperature_loss(self.log_alpha, log_prob, self.target_entropy)
        self.alpha_optimizer.apply_gradients(zip(tape.gradient(alpha_loss, [self.log_alpha]), [self.log_alpha]))

        target = self.target(batch, alpha)
        with tf.GradientTape() as tape:
            q1 = DeterministicActor.q(self.critic1, batch.obs, batch.action)
            q2 = DeterministicActor.q(self.critic2, batch.obs, batch.action)
            critic_loss = 0.5 * losses.td3_critic_loss(q1, q2, target, batch.weight)
        self.critic_optimizer.apply_gradients(zip(tape.gradient(critic_loss, self._critic_vars), self._critic_vars))

        actor_vars = self.actor.trainable_variables
        with actor_tape:  # on the critics after their step
            q_pi = tf.minimum(DeterministicActor.q(self.critic1, batch.obs, action),
                              DeterministicActor.q(self.critic2, batch.obs, action))
            actor_loss = losses.sac_actor_loss(alpha, log_prob, q_pi)
        self.actor_optimizer.apply_gradients(zip(actor_tape.gradient(actor_loss, actor_vars), actor_vars))
        losses.soft_update(self._targets, self._online, self.tau)
        return {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "alpha_loss": alpha_loss,
            "alpha": alpha,
            "entropy": -tf.reduce_mean(log_prob),
            "q1": tf.reduce_mean(q1),
            "q2": tf.reduce_mean(q2),
            "target_q": tf.reduce_mean(target),
            "td_error": tf.maximum(tf.abs(target - q1), tf.abs(target - q2)),
        }

    def target(self, batch: Batch, alpha: tf.Tensor) -> tf.Tensor:
        """r + discount * (min(Q1', Q2')(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s')."""
        next_action, next_log_prob = self.sample(batch.next_obs)
        next_q = tf.minimum(DeterministicActor.q(self.critic1_target, batch.next_obs, next_action, training=False),
                            DeterministicActor.q(self.critic2_target, batch.next_obs, next_action, training=False))
        return losses.td_target(batch.reward, batch.discount, losses.soft_value(next_q, alpha, next_log_prob))
