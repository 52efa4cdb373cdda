"""What SAC and CrossQ share: a squashed Gaussian policy scaled to the action box. The actor
outputs a mean and a raw log std per action dimension; a class's `log_std` maps the raw output to
the log std (SAC: `agent.log_std`, SB3's clamp or CleanRL's tanh bounds; CrossQ: SB3's clamp). Each algorithm writes its own
update, so changing one never changes the other by accident."""
from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from agents import checks, losses
from agents.acting import Forward
from agents.base import ActionBox, critic_network, network_input, tf_seed
from agents.needs import Needs
from buffers.types import obs_shape_of


class SquashedGaussianActor:
    ACTION_KIND = "continuous"
    needs = Needs()
    log_std = staticmethod(losses.bounded_log_std)  # the head's raw output -> log std, tf or numpy

    def __init__(self, obs_shape: int | tuple[int, ...], action_low: np.ndarray, action_high: np.ndarray,
                 network: Callable[..., keras.Model], rng: np.random.Generator,
                 tanh_epsilon: float = losses.TANH_EPSILON):
        self.tanh_epsilon = checks.number(
            tanh_epsilon, "tanh_epsilon", f"a number in [0, 1e-2] ({losses.TANH_EPSILON:g} in SB3 and CleanRL: "
            f"log(1 - a^2 + eps); 0: the exact log(1 - tanh(u)^2))", lambda x: 0 <= x <= 1e-2)
        self.obs_in = network_input(obs_shape)  # a vector's size, or an image's shape
        self.obs_shape = obs_shape_of(obs_shape)
        self.box = ActionBox(action_low, action_high)
        self.action_dim, self.action_spec = self.box.dim, self.box.spec
        self.low, self.high = self.box.low, self.box.high
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))
        self.actor = network(self.obs_in, 2 * self.action_dim, name="actor")  # mean and raw log std
        self.acting = Forward(self.actor)

    def critic_network(self, network: Callable[..., keras.Model], name: str) -> keras.Model:
        """A critic Q(s, a), one value out: (obs, action) concatenated in, or an image and an action."""
        return critic_network(network, self.obs_in, self.action_dim, name)

    def sample(self, obs: tf.Tensor, training: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
        """a ~ pi(.|s) in the env's box, reparameterised, and log pi(a|s) of its squashed form;
        `training` is the actor's mode (its Batch Renormalization's statistics move in it)."""
        mean, raw = tf.split(self.actor(obs, training=training), 2, axis=-1)
        noise = self._tf_rng.normal(tf.shape(mean))
        squashed, log_prob = losses.squashed_gaussian(mean, self.log_std(raw), noise, self.tanh_epsilon)
        return losses.scale_action(squashed, self.low, self.high), log_prob

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        mean, _ = tf.split(self.actor(obs, training=False), 2, axis=-1)
        return losses.scale_action(tf.tanh(mean), self.low, self.high)

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """tanh(mean) in the box; with `explore`, tanh(mean + std * noise), the noise from the run's
        generator. The actor in inference mode, as SB3 collects rollouts."""
        out = self.acting(obs)
        u = out[:, : self.action_dim]
        if explore:
            u = u + np.exp(self.log_std(out[:, self.action_dim:])) * self._rng.standard_normal(u.shape)
        return self.box.from_unit(np.tanh(u)).astype(np.float32)

    def host_metrics(self) -> dict[str, float]:
        return {}
