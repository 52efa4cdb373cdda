"""CrossQ (Bhatt et al., ICLR 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity"), in the order of sb3-contrib's `CrossQ.train()`.

SAC without target networks: the critics carry Batch Renormalization (`network.batch_renorm`) and
see the current and the next state-action pairs in one joint forward pass, so that the batch
statistics of every layer are those of both; the next pairs' Q values, cut from the gradient, give
the soft target r + discount * (min(Q1, Q2)(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s') drawn
with the actor in inference mode. The critics' loss is half the sum of their mean squared errors.
Every `policy_delay`-th update the actor, in training mode, samples a ~ pi(.|s); the temperature
steps on -log_alpha * (log pi + target_entropy), and the actor on alpha * log pi - min(Q1, Q2)(s, a)
with the critics in inference mode (their running statistics) and the temperature from before
this update. Adam's beta_1 is 0.5 for the actor and critics, 0.9 for the temperature.

Where sb3-contrib and SBX differ, this follows sb3-contrib (the unbiased batch variance, renorm
from the warmup's (W+1)-th call on, log(1 - tanh(u)^2 + 1e-6) in the squashed Gaussian's log density;
`tanh_epsilon=0` gives SBX's exact form).
"""
from __future__ import annotations

import math
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import checks, losses
from agents.optimizers import adam
from agents.deterministic import DeterministicActor
from agents.sac import check_target_entropy
from agents.stochastic import SquashedGaussianActor
from buffers.types import Batch
from networks.batch_renorm import has_batch_renorm

def joint_q(critic: keras.Model, batch: Batch, next_action: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Q(s, a) and Q(s', a') from one training-mode pass over the 2B rows of both, so that the batch
    statistics are those of the two batches together (the paper's concatenated forward)."""
    q = DeterministicActor.q(critic, tf.concat([batch.obs, batch.next_obs], axis=0),
                             tf.concat([batch.action, next_action], axis=0), training=True)
    return tf.split(q, 2, axis=0)


def crossq_critic_loss(q1: tf.Tensor, q2: tf.Tensor, target: tf.Tensor, weight: tf.Tensor | None = None) -> tf.Tensor:
    """0.5 * (mse(Q1, y) + mse(Q2, y)): sb3-contrib's 0.5 * sum over the critics."""
    return 0.5 * losses.td3_critic_loss(q1, q2, target, weight)


class CrossQ(SquashedGaussianActor):
    log_std = staticmethod(losses.clipped_log_std)  # sb3-contrib's clamp to [-20, 2]

    def __init__(
        self,
        obs_shape: int | tuple[int, ...],
        action_low: np.ndarray,
        action_high: np.ndarray,
        network: Callable[..., keras.Model],
        rng: np.random.Generator,
        actor_lr: float = 1e-3,
        critic_lr: float = 1e-3,
        alpha_lr: float = 1e-3,
        beta_1: float = 0.5,
        policy_delay: int = 3,
        init_alpha: float = 1.0,
        target_entropy: float | str = "auto",
        tanh_epsilon: float = losses.TANH_EPSILON,
    ):
        checks.integer(policy_delay, "policy_delay", "an integer >= 1 (3 in CrossQ: the actor steps on every third update)")
        checks.number(init_alpha, "init_alpha", "a positive number (1.0 in sb3-contrib)", lambda x: x > 0)
        checks.number(beta_1, "beta_1", "in [0, 1) (0.5 in CrossQ, 0.9 Adam's default)", lambda x: 0 <= x < 1)
        super().__init__(obs_shape, action_low, action_high, network, rng, tanh_epsilon)
        self.policy_delay = int(policy_delay)
        self.target_entropy = check_target_entropy(target_entropy, self.action_dim)

        self.critic1, self.critic2 = self.critic_network(network, "critic1"), self.critic_network(network, "critic2")
        if not all(has_batch_renorm(n) for n in (self.actor, self.critic1, self.critic2)):
            raise ValueError("agent=crossq needs Batch Renormalization in its networks (it keeps no target networks; "
                             "the batch statistics of the joint forward pass stand in for them): use network=mlp, whose "
                             "preset for CrossQ sets network.batch_renorm=true, and leave batch_renorm on.")
        self.log_alpha = tf.Variable(math.log(init_alpha), dtype=tf.float32, name="log_alpha")
        self._critic_vars = self.critic1.trainable_variables + self.critic2.trainable_variables
        self.actor_optimizer, self.critic_optimizer = adam(actor_lr, beta_1), adam(critic_lr, beta_1)
        self.alpha_optimizer = adam(alpha_lr)
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.critic_optimizer.build(self._critic_vars)
        self.alpha_optimizer.build([self.log_alpha])
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        # the delayed step's losses, last written when it ran (metrics of every update)
        self._actor_loss = tf.Variable(0.0, trainable=False, name="actor_loss")
        self._alpha_loss = tf.Variable(0.0, trainable=False, name="alpha_loss")
        self._entropy = tf.Variable(0.0, trainable=False, name="entropy")

    # --- the update -----------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        self.updates.assign_add(1)
        alpha = tf.exp(self.log_alpha)  # this update's temperature: the value before its own step
        next_action, next_log_prob = self.sample(batch.next_obs, training=False)
        with tf.GradientTape() as tape:
            q1, next_q1 = joint_q(self.critic1, batch, next_action)
            q2, next_q2 = joint_q(self.critic2, batch, next_action)
            next_q = tf.stop_gradient(tf.minimum(next_q1, next_q2))
            target = losses.td_target(batch.reward, batch.discount, losses.soft_value(next_q, alpha, next_log_prob))
            critic_loss = crossq_critic_loss(q1, q2, target, batch.weight)
        self.critic_optimizer.apply_gradients(zip(tape.gradient(critic_loss, self._critic_vars), self._critic_vars))

        tf.cond(self.updates % self.policy_delay == 0, lambda: self.delayed_update(batch.obs, alpha),
                lambda: tf.constant(False))
        return {
            "critic_loss": critic_loss,
            "actor_loss": tf.identity(self._actor_loss),
            "alpha_loss": tf.identity(self._alpha_loss),
            "alpha": alpha,
            "entropy": tf.identity(self._entropy),
            "q1": tf.reduce_mean(q1),
            "q2": tf.reduce_mean(q2),
            "target_q": tf.reduce_mean(target),
            "td_error": tf.maximum(tf.abs(target - q1), tf.abs(target - q2)),
        }

    def delayed_update(self, obs: tf.Tensor, alpha: tf.Tensor) -> tf.Tensor:
        """The temperature's step, then the actor's on the critics in inference mode."""
        actor_vars = self.actor.trainable_variables
        with tf.GradientTape() as actor_tape:
            action, log_prob = self.sample(obs, training=True)
        with tf.GradientTape() as tape:
            alpha_loss = losses.temperature_loss(self.log_alpha, log_prob, self.target_entropy)
        self.alpha_optimizer.apply_gradients(zip(tape.gradient(alpha_loss, [self.log_alpha]), [self.log_alpha]))
        with actor_tape:
            q_pi = tf.minimum(DeterministicActor.q(self.critic1, obs, action, training=False),
                              DeterministicActor.q(self.critic2, obs, action, training=False))
            actor_loss = losses.sac_actor_loss(alpha, log_prob, q_pi)
        self.actor_optimizer.apply_gradients(zip(actor_tape.gradient(actor_loss, actor_vars), actor_vars))
        self._actor_loss.assign(actor_loss)
        self._alpha_loss.assign(alpha_loss)
        self._entropy.assign(-tf.reduce_mean(log_prob))
        return tf.constant(True)
