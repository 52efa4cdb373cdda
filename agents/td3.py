"""TD3 (Fujimoto, van Hoof & Meger 2018), following the author's code (sfujim/TD3, `train()`).

Per update: both critics regress onto r + discount * min(Q1', Q2')(s', a'~), with a'~ the target
actor's action plus clipped Gaussian smoothing noise. Every `policy_delay`-th update the actor
ascends Q1 and all three target networks move by Polyak averaging; on the other updates neither
the actor nor any target moves. The delay counter is a tf.Variable, so it is checkpointed.
"""
from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import checks, losses
from agents.base import check_tau, copy_of
from agents.optimizers import adam
from agents.deterministic import DeterministicActor, deterministic_actor_loss
from buffers.types import Batch


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


def clipped_double_q(q1: tf.Tensor, q2: tf.Tensor) -> tf.Tensor:
    """TD3's pessimistic estimate: the smaller of the two target critics."""
    return tf.minimum(q1, q2)


class TD3(DeterministicActor):
    def __init__(
        self,
        obs_shape: int | tuple[int, ...],
        action_low: np.ndarray,
        action_high: np.ndarray,
        network: Callable[..., keras.Model],
        rng: np.random.Generator,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        tau: float = 0.005,
        policy_delay: int = 2,
        target_noise: float = 0.2,
        noise_clip: float = 0.5,
        exploration_noise: float = 0.1,
    ):
        policy_delay = checks.integer(policy_delay, "policy_delay", "an integer >= 1 (2 in TD3)")
        super().__init__(obs_shape, action_low, action_high, network, rng, actor_lr, exploration_noise)
        self.tau = check_tau(tau)
        self.policy_delay = int(policy_delay)
        self.target_noise, self.noise_clip = float(target_noise), float(noise_clip)
        self.critic1 = self.critic_network(network, "critic1")
        self.critic2 = self.critic_network(network, "critic2")
        self.critic1_target = copy_of(self.critic1, self.critic_network(network, "critic1_target"))
        self.critic2_target = copy_of(self.critic2, self.critic_network(network, "critic2_target"))
        self._critic_vars = self.critic1.trainable_variables + self.critic2.trainable_variables
        self.critic_optimizer = adam(critic_lr)
        self.critic_optimizer.build(self._critic_vars)
        self._online = self.actor.weights + self.critic1.weights + self.critic2.weights
        self._targets = self.actor_target.weights + self.critic1_target.weights + self.critic2_target.weights
        self._actor_loss = tf.Variable(0.0, trainable=False, name="actor_loss")  # reported between delayed updates

    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        self.updates.assign_add(1)
        target = self.target(batch)
        with tf.GradientTape() as tape:
            q1 = self.q(self.critic1, batch.obs, batch.action)
            q2 = self.q(self.critic2, batch.obs, batch.action)
            critic_loss = losses.td3_critic_loss(q1, q2, target, batch.weight)
        grads = tape.gradient(critic_loss, self._critic_vars)
        self.critic_optimizer.apply_gradients(zip(grads, self._critic_vars))

        tf.cond(self.updates % self.policy_delay == 0, lambda: self.delayed_update(batch.obs), lambda: tf.constant(False))
        return {
            "critic_loss": critic_loss,
            "actor_loss": tf.identity(self._actor_loss),
            "q1": tf.reduce_mean(q1),
            "q2": tf.reduce_mean(q2),
            "target_q": tf.reduce_mean(target),
            # per sample, for prioritized replay (LAP-style: the larger of the two TD errors)
            "td_error": tf.maximum(tf.abs(target - q1), tf.abs(target - q2)),
        }

    def target(self, batch: Batch) -> tf.Tensor:
        """r + discount * min(Q1', Q2')(s', a'~), a'~ the target policy's smoothed action."""
        noise = self._tf_rng.normal(tf.shape(batch.action)) * self.target_noise * self.half_range
        next_action = smoothed_target_action(
            self.target_policy(batch.next_obs), noise, self.noise_clip, self.half_range, self.low, self.high
        )
        next_q = clipped_double_q(
            self.q(self.critic1_target, batch.next_obs, next_action, training=False),
            self.q(self.critic2_target, batch.next_obs, next_action, training=False),
        )
        return losses.td_target(batch.reward, batch.discount, next_q)

    def delayed_update(self, obs: tf.Tensor) -> tf.Tensor:
        """The actor ascends Q1, then every target network moves by Polyak averaging."""
        actor_vars = self.actor.trainable_variables
        with tf.GradientTape() as tape:
            actor_loss = deterministic_actor_loss(self.q(self.critic1, obs, self.policy(obs)))
        grads = tape.gradient(actor_loss, actor_vars)
        self.actor_optimizer.apply_gradients(zip(grads, actor_vars))
        self._actor_loss.assign(actor_loss)
        losses.soft_update(self._targets, self._online, self.tau)
        return tf.constant(True)
