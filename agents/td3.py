"""TD3 (Fujimoto, van Hoof & Meger 2018), following the author's code (sfujim/TD3).

Per update: both critics regress onto r + discount * min(Q1', Q2')(s', a'~), with a'~ the target
actor's action plus clipped Gaussian smoothing noise. Every `policy_delay`-th update the actor
ascends Q1 and all three target networks move by Polyak averaging; on the other updates neither
the actor nor any target moves. The delay counter is a tf.Variable, so it is checkpointed.
With `batch_shards` > 1 each pass runs shard by shard on the batch's equal shards, and the losses
are the shards' mean (see `agents.base.shard_batch`).
"""
from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import losses
from agents.base import DeterministicActorAgent, adam, shard_batch, shard_mean, split, unshard
from buffers.types import Batch


class TD3(DeterministicActorAgent):
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
        policy_delay: int = 2,
        target_noise: float = 0.2,
        noise_clip: float = 0.5,
        exploration_noise: float = 0.1,
        compile: str = "graph",
        fast_act: bool = True,
        batch_shards: int = 1,
        update_precision: str = "float32",
    ):
        if policy_delay < 1:
            raise ValueError(f"agent.policy_delay must be at least 1, got {policy_delay}")
        super().__init__(
            obs_dim, action_low, action_high, network, rng, actor_lr, exploration_noise, compile,
            fast_act, batch_shards, update_precision,
        )
        self.tau = float(tau)
        self.policy_delay = int(policy_delay)
        self.target_noise = float(target_noise)
        self.noise_clip = float(noise_clip)

        critic_in = self.obs_dim + self.action_dim
        self.critic1 = network(critic_in, 1, name="critic1")
        self.critic2 = network(critic_in, 1, name="critic2")
        self.critic1_target = network(critic_in, 1, name="critic1_target")
        self.critic2_target = network(critic_in, 1, name="critic2_target")
        self.critic1_target.set_weights(self.critic1.get_weights())
        self.critic2_target.set_weights(self.critic2.get_weights())
        self._critic_vars = self.critic1.trainable_variables + self.critic2.trainable_variables
        self.critic_optimizer = adam(critic_lr)
        self.critic_optimizer.build(self._critic_vars)
        self._online_vars = self.actor.weights + self.critic1.weights + self.critic2.weights
        self._target_vars = (
            self.actor_target.weights + self.critic1_target.weights + self.critic2_target.weights
        )
        # The last actor loss, held so that non-delayed updates can report it.
        self._actor_loss = tf.Variable(0.0, trainable=False, name="actor_loss")
        self._compile_update()

    def _update(self, batch: Batch) -> dict[str, tf.Tensor]:
        self.updates.assign_add(1)
        noise = self._tf_rng.normal(tf.shape(batch.action)) * self.target_noise * self.half_range
        shards = shard_batch(batch, self.batch_shards)
        targets = [self._target(s, n) for s, n in zip(shards, split(noise, self.batch_shards))]
        with tf.GradientTape() as tape:
            q1 = [self._q(self.critic1, s.obs, s.action) for s in shards]
            q2 = [self._q(self.critic2, s.obs, s.action) for s in shards]
            critic_loss = shard_mean([
                losses.td3_critic_loss(a, b, t, s.weight) for a, b, t, s in zip(q1, q2, targets, shards)
            ])
        grads = tape.gradient(critic_loss, self._critic_vars)
        self.critic_optimizer.apply_gradients(zip(grads, self._critic_vars))

        tf.cond(
            self.updates % self.policy_delay == 0,
            lambda: self._delayed_update([s.obs for s in shards]),
            lambda: tf.constant(False),
        )
        q1, q2, target = unshard(q1), unshard(q2), unshard(targets)
        return {
            "critic_loss": critic_loss,
            "actor_loss": tf.identity(self._actor_loss),
            "q1": tf.reduce_mean(q1),
            "q2": tf.reduce_mean(q2),
            "target_q": tf.reduce_mean(target),
            # per-sample, for prioritized replay (LAP-style: the larger of the two TD errors)
            "td_error": tf.maximum(tf.abs(target - q1), tf.abs(target - q2)),
        }

    def _target(self, batch: Batch, noise: tf.Tensor) -> tf.Tensor:
        """r + discount * min(Q1', Q2')(s', a'~) for a batch (or shard) and its smoothing noise."""
        next_action = losses.smoothed_target_action(
            self._target_policy(batch.next_obs),
            noise,
            self.noise_clip,
            self.half_range,
            self.low,
            self.high,
        )
        next_q = losses.clipped_double_q(
            self._q(self.critic1_target, batch.next_obs, next_action),
            self._q(self.critic2_target, batch.next_obs, next_action),
        )
        return losses.td_target(batch.reward, batch.discount, next_q)

    def _delayed_update(self, obs: list[tf.Tensor]) -> tf.Tensor:
        """Actor step on Q1 (over the observations' shards), then Polyak update of every target network."""
        actor_vars = self.actor.trainable_variables
        with tf.GradientTape() as tape:
            actor_loss = shard_mean([
                losses.deterministic_actor_loss(self._q(self.critic1, o, self._policy(o))) for o in obs
            ])
        grads = tape.gradient(actor_loss, actor_vars)
        self.actor_optimizer.apply_gradients(zip(grads, actor_vars))
        self._actor_loss.assign(actor_loss)
        losses.soft_update(self._target_vars, self._online_vars, self.tau)
        return tf.constant(True)

    def trackables(self) -> dict:
        return {
            "actor": self.actor,
            "actor_target": self.actor_target,
            "critic1": self.critic1,
            "critic2": self.critic2,
            "critic1_target": self.critic1_target,
            "critic2_target": self.critic2_target,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "updates": self.updates,
            "actor_loss": self._actor_loss,
            "tf_rng": self._tf_rng,
        }
