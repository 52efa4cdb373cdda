"""DDPG (Lillicrap et al. 2016), in the form the TD3 paper compares against ("OurDDPG" in
sfujim/TD3): one critic, actor and targets updated on every step, Gaussian exploration noise.

The original paper's L2 weight decay on the critic is `critic_l2`: a penalty on the critic's
kernels added to its loss, whose gradient is critic_l2 * w (PyTorch's `weight_decay` on the
kernels; sfujim/TD3's DDPG.py passes weight_decay to Adam, which decays the biases too); its other
settings (400-300 nets, lr 1e-4 / 1e-3, tau 1e-3) are config values.
"""
from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import losses
from agents.base import check_tau, copy_of
from agents.optimizers import adam
from agents.deterministic import DeterministicActor, deterministic_actor_loss
from buffers.types import Batch


class DDPG(DeterministicActor):
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
        critic_l2: float = 0.0,
        exploration_noise: float = 0.1,
    ):
        super().__init__(obs_shape, action_low, action_high, network, rng, actor_lr, exploration_noise)
        self.tau = check_tau(tau)
        self.critic = self.critic_network(network, "critic", l2=critic_l2)
        self.critic_target = copy_of(self.critic, self.critic_network(network, "critic_target", l2=critic_l2))
        self.critic_optimizer = adam(critic_lr)
        self.critic_optimizer.build(self.critic.trainable_variables)
        self._online = self.actor.weights + self.critic.weights
        self._targets = self.actor_target.weights + self.critic_target.weights

    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        self.updates.assign_add(1)
        next_q = self.q(self.critic_target, batch.next_obs, self.target_policy(batch.next_obs), training=False)
        target = losses.td_target(batch.reward, batch.discount, next_q)
        critic_vars = self.critic.trainable_variables
        with tf.GradientTape() as tape:
            q = self.q(self.critic, batch.obs, batch.action)
            critic_loss = losses.mse(q, target, batch.weight)
            penalty = tf.add_n(self.critic.losses) if self.critic.losses else tf.constant(0.0)
            total = critic_loss + penalty
        grads = tape.gradient(total, critic_vars)
        self.critic_optimizer.apply_gradients(zip(grads, critic_vars))

        actor_vars = self.actor.trainable_variables
        with tf.GradientTape() as tape:
            actor_loss = deterministic_actor_loss(self.q(self.critic, batch.obs, self.policy(batch.obs)))
        grads = tape.gradient(actor_loss, actor_vars)
        self.actor_optimizer.apply_gradients(zip(grads, actor_vars))
        losses.soft_update(self._targets, self._online, self.tau)
        return {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "q1": tf.reduce_mean(q),
            "target_q": tf.reduce_mean(target),
            "td_error": tf.abs(target - q),  # per sample, for prioritized replay
        }
