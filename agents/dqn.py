"""DQN (Mnih et al. 2015) with a target network, Huber or MSE loss, epsilon-greedy exploration,
on vector observations (an MLP) or images (a CNN: network=nature_cnn, impala_cnn),
and switches for Double DQN (van Hasselt et al. 2016); a dueling head (Wang et al. 2016) comes from
`network=dueling_mlp`, or `network.dueling=true` on a CNN.

The target network is copied every `target_update_every` updates (tau=1) or Polyak-averaged with
`tau` < 1 every update. The position in the epsilon schedule is checkpointed with the networks.
"""
from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import checks, losses
from agents.acting import Forward
from agents.base import Counter, check_tau, copy_of
from agents.needs import Needs
from agents.optimizers import adam
from buffers.types import Batch, obs_shape_of


class DQN:
    ACTION_KIND = "discrete"
    needs = Needs()

    def __init__(
        self,
        obs_shape: int | tuple[int, ...],
        num_actions: int,
        network: Callable[..., keras.Model],
        rng: np.random.Generator,
        lr: float = 1e-3,
        double: bool = True,
        loss: str = "huber",
        target_update_every: int = 500,
        tau: float = 1.0,
        max_grad_norm: float | None = 10.0,
        eps_start: float = 1.0,
        eps_end: float = 0.05,
        eps_decay_steps: int = 10000,
    ):
        checks.choice(loss, "loss", ("huber", "mse"))
        checks.integer(target_update_every, "target_update_every", "an integer >= 1 (500: updates between copies)")
        for key, eps in (("eps_start", eps_start), ("eps_end", eps_end)):
            checks.number(eps, key, "in [0, 1]", lambda x: 0.0 <= x <= 1.0)
        self.obs_shape = obs_shape_of(obs_shape)
        self.num_actions = int(num_actions)
        self.action_spec = tf.TensorSpec([None], tf.int32, name="action")
        self.double, self.tau = bool(double), check_tau(tau)
        self.loss_fn = losses.huber if loss == "huber" else losses.mse
        self.target_update_every, self.max_grad_norm = int(target_update_every), max_grad_norm
        self.eps_start, self.eps_end, self.eps_decay_steps = float(eps_start), float(eps_end), int(eps_decay_steps)
        self._rng = rng

        self.q = network(self.obs_shape, self.num_actions, name="q")  # vectors or images, as the network takes
        self.q_target = copy_of(self.q, network(self.obs_shape, self.num_actions, name="q_target"))
        self.optimizer = adam(lr)
        self.optimizer.build(self.q.trainable_variables)
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.explore_steps = Counter()  # env steps acted with exploration: the epsilon schedule's clock
        self.acting = Forward(self.q)

    # --- acting -------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        return losses.linear_schedule(self.eps_start, self.eps_end, self.eps_decay_steps, self.explore_steps.value)

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Greedy actions for a batch of observations; with `explore`, each is replaced by a
        uniform random action with probability epsilon, and the schedule advances."""
        action = np.argmax(self.acting(obs), axis=1).astype(np.int64)
        if explore:
            n = action.shape[0]
            random_mask = self._rng.random(n) < self.epsilon
            action = np.where(random_mask, self._rng.integers(0, self.num_actions, size=n), action)
            self.explore_steps.value += n
        return action

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        return tf.argmax(self.q(obs, training=False), axis=1, output_type=tf.int32)

    def host_metrics(self) -> dict[str, float]:
        return {"epsilon": self.epsilon}

    # --- updating -----------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        self.updates.assign_add(1)
        target = self.target(batch)
        variables = self.q.trainable_variables
        with tf.GradientTape() as tape:
            q_taken = losses.q_of_actions(self.q(batch.obs, training=True), batch.action)
            loss = self.loss_fn(q_taken, target, batch.weight)
        grads = tape.gradient(loss, variables)
        if self.max_grad_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.max_grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables))
        if self.tau < 1.0:
            losses.soft_update(self.q_target.weights, self.q.weights, self.tau)
        else:
            tf.cond(self.updates % self.target_update_every == 0, self._copy_to_target, lambda: tf.constant(False))
        return {
            "loss": loss,
            "q": tf.reduce_mean(q_taken),
            "target_q": tf.reduce_mean(target),
            "td_error": tf.abs(target - q_taken),
        }

    def target(self, batch: Batch) -> tf.Tensor:
        """r + discount * V'(s'): max_a Q'(s', a), or Q' at the online network's argmax with Double DQN."""
        next_q_online = self.q(batch.next_obs, training=False) if self.double else None
        next_v = losses.dqn_next_value(self.q_target(batch.next_obs, training=False), next_q_online)
        return losses.td_target(batch.reward, batch.discount, next_v)

    def _copy_to_target(self) -> tf.Tensor:
        losses.soft_update(self.q_target.weights, self.q.weights, 1.0)  # tau 1: a hard copy
        return tf.constant(True)
