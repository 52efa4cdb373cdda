"""What DDPG and TD3 share (and TD7 in part: its exploration noise and actor loss): a tanh actor
scaled to the action box, its target copy, Gaussian exploration noise scaled by the action
half-range, Q(s, a) of a critic, and the deterministic policy gradient's loss. Each algorithm writes
its own update, so changing one never changes the other by accident."""
from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import losses
from agents.acting import Forward
from agents.base import ActionBox, copy_of, critic_input, critic_network, network_input, tf_seed
from agents.needs import Needs
from agents.optimizers import adam
from buffers.types import obs_shape_of


def deterministic_actor_loss(q: tf.Tensor) -> tf.Tensor:
    """Deterministic policy gradient objective: maximise Q(s, pi(s)), i.e. minimise its negative mean."""
    return -tf.reduce_mean(q)


def box_action(box: ActionBox, unit: np.ndarray, rng: np.random.Generator, noise: float | None) -> np.ndarray:
    """A tanh policy's output in [-1, 1] as actions in the box; with a `noise` (not None), plus
    Gaussian noise of std `noise * half_range`, clipped to the box (sfujim/TD3's and TD7's exploration)."""
    action = box.from_unit(unit)
    if noise is not None:
        action = np.clip(action + rng.normal(0.0, noise, size=action.shape) * box.half_np, box.low_np, box.high_np,
                         out=action)
    return action.astype(np.float32, copy=False)


class DeterministicActor:
    ACTION_KIND = "continuous"
    needs = Needs()

    def __init__(self, obs_shape: int | tuple[int, ...], action_low: np.ndarray, action_high: np.ndarray,
                 network: Callable[..., keras.Model], rng: np.random.Generator, actor_lr: float,
                 exploration_noise: float):
        self.obs_in = network_input(obs_shape)  # a vector's size, or an image's shape
        self.obs_shape = obs_shape_of(obs_shape)
        self.box = ActionBox(action_low, action_high)
        self.action_dim, self.action_spec = self.box.dim, self.box.spec
        self.low, self.high, self.half_range = self.box.low, self.box.high, self.box.half_range
        self.exploration_noise = float(exploration_noise)
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))

        self.actor = network(self.obs_in, self.action_dim, output_activation="tanh", name="actor")
        self.actor_target = copy_of(self.actor, network(self.obs_in, self.action_dim, output_activation="tanh",
                                                        name="actor_target"))
        self.actor_optimizer = adam(actor_lr)
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.acting = Forward(self.actor)

    def critic_network(self, network: Callable[..., keras.Model], name: str, **kwargs) -> keras.Model:
        """A critic Q(s, a), one value out: (obs, action) concatenated in, or an image and an action."""
        return critic_network(network, self.obs_in, self.action_dim, name, **kwargs)

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.actor(obs, training=False), self.low, self.high)

    def target_policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.actor_target(obs, training=False), self.low, self.high)

    @staticmethod
    def q(critic: keras.Model, obs: tf.Tensor, action: tf.Tensor, training: bool = True) -> tf.Tensor:
        """A critic's Q(s, a) for a batch, shape (B,)."""
        return tf.squeeze(critic(critic_input(obs, action), training=training), axis=-1)

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions for a batch of observations; with `explore`, Gaussian noise of std
        `exploration_noise * half_range`, clipped to the action box."""
        return box_action(self.box, self.acting(obs), self._rng, self.exploration_noise if explore else None)

    def host_metrics(self) -> dict[str, float]:
        return {}
