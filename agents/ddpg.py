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
from agents.base import DeterministicActorAgent, adam, shard_batch, shard_mean, unshard
from buffers.types import Batch


class DDPG(DeterministicActorAgent):
    def __init__(
        self,
        obs_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        network: Callable[..., keras.Model],
        rng: np.random.Generator,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        tau: float = 0.005,
        critic_l2: float = 0.0,
        exploration_noise: float = 0.1,
        compile: str = "graph",
        fast_act: bool = True,
        batch_shards: int = 1,
        update_precision: str = "float32",
    ):
        super().__init__(
            obs_dim, action_low, action_high, network, rng, actor_lr, exploration_noise, compile,
            fast_act, batch_shards, update_precision,
        )
        self.tau = float(tau)
        critic_in = self.obs_dim + self.action_dim
        self.critic = network(critic_in, 1, l2=critic_l2, name="critic")
        self.critic_target = network(critic_in, 1, l2=critic_l2, name="critic_target")
        self.critic_target.set_weights(self.critic.get_weights())
        self.critic_optimizer = adam(critic_lr)
        self.critic_optimizer.build(self.critic.trainable_variables)
        self._online_vars = self.actor.weights + self.critic.weights
        self._target_vars = self.actor_target.weights + self.critic_target.weights
        self._compile_update()

    def _update(self, batch: Batch) -> dict[str, tf.Tensor]:
        self.updates.assign_add(1)
        shards = shard_batch(batch, self.batch_shards)
        targets = [
            losses.td_target(s.reward, s.discount, self._q(self.critic_target, s.next_obs, self._target_policy(s.next_obs)))
            for s in shards
        ]
        critic_vars = self.critic.trainable_variables
        with tf.GradientTape() as tape:
            q = [self._q(self.critic, s.obs, s.action) for s in shards]
            critic_loss = shard_mean([losses.mse(qs, t, s.weight) for qs, t, s in zip(q, targets, shards)])
            penalty = tf.add_n(self.critic.losses) if self.critic.losses else tf.constant(0.0)
            total = critic_loss + penalty
        grads = tape.gradient(total, critic_vars)
        self.critic_optimizer.apply_gradients(zip(grads, critic_vars))

        actor_vars = self.actor.trainable_variables
        with tf.GradientTape() as tape:
            actor_loss = shard_mean([
                losses.deterministic_actor_loss(self._q(self.critic, s.obs, self._policy(s.obs))) for s in shards
            ])
        grads = tape.gradient(actor_loss, actor_vars)
        self.actor_optimizer.apply_gradients(zip(grads, actor_vars))
        losses.soft_update(self._target_vars, self._online_vars, self.tau)
        q, target = unshard(q), unshard(targets)
        return {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "q1": tf.reduce_mean(q),
            "target_q": tf.reduce_mean(target),
            "td_error": tf.abs(target - q),  # per-sample, for prioritized replay
        }

    def trackables(self) -> dict:
        return {
            "actor": self.actor,
            "actor_target": self.actor_target,
            "critic": self.critic,
            "critic_target": self.critic_target,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "updates": self.updates,
            "tf_rng": self._tf_rng,
        }
