"""TD7's networks (Fujimoto et al. 2023, "For SALE"; sfujim/TD7's `Encoder`, `Actor`, `Critic`).

SALE learns two embeddings: the state encoder f(s) = zs and the state-action encoder g(zs, a) =
zsa, trained so that zsa predicts the next state's zs. The actor pi(s, zs) and the twin critic
Q(s, a, zsa, zs) take them beside the raw inputs. Each first layer on a raw input, and the state
encoder's output, are scaled by AvgL1Norm, so the embeddings and the raw features keep the same
size whatever the encoder learns. With `embeddings=False` the actor and critic take only the raw
inputs (TD7 without SALE).
"""
from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf

from networks.mlp import check_width, dense

ACTIVATIONS = ("relu", "elu", "tanh")


@keras.saving.register_keras_serializable(package="tfrl")
class AvgL1Norm(keras.layers.Layer):
    """x / max(mean(|x|), epsilon) over the last axis: TD7's normalization of its embeddings."""

    def __init__(self, epsilon: float = 1e-8, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def call(self, x):
        scale = keras.ops.mean(keras.ops.abs(x), axis=-1, keepdims=True)
        return x / keras.ops.maximum(scale, self.epsilon)

    def get_config(self) -> dict:
        return {**super().get_config(), "epsilon": self.epsilon}


def _check_width(value, key: str) -> int:
    return check_width(value, key, "256 in TD7")


class Encoder(NamedTuple):
    """SALE's two encoders: zs = f(s) and zsa = g([zs, a])."""

    zs: keras.Model
    zsa: keras.Model

    def embed(self, zs: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
        return self.zsa(tf.concat([zs, action], axis=-1))

    @property
    def weights(self) -> list:
        return self.zs.weights + self.zsa.weights

    @property
    def trainable_variables(self) -> list:
        return self.zs.trainable_variables + self.zsa.trainable_variables


class SALE:
    """The builders of TD7's networks, with the author's sizes and activations as defaults. A
    network group (`network=sale`): the agent asks it for each network by role."""

    def __init__(self, zs_dim: int = 256, encoder_hidden: int = 256, critic_hidden: int = 256,
                 actor_hidden: int = 256, encoder_activation: str = "elu", critic_activation: str = "elu",
                 actor_activation: str = "relu", init: str = "torch"):
        self.zs_dim = _check_width(zs_dim, "zs_dim")
        self.encoder_hidden = _check_width(encoder_hidden, "encoder_hidden")
        self.critic_hidden = _check_width(critic_hidden, "critic_hidden")
        self.actor_hidden = _check_width(actor_hidden, "actor_hidden")
        for key, value in (("encoder_activation", encoder_activation), ("critic_activation", critic_activation),
                           ("actor_activation", actor_activation)):
            if value not in ACTIVATIONS:
                raise ValueError(f"network.{key} must be one of {', '.join(ACTIVATIONS)}, got {value!r}")
        self.encoder_activation, self.critic_activation = encoder_activation, critic_activation
        self.actor_activation, self.init = actor_activation, init

    def __call__(self, *args, name: str = "network", **kwargs):
        raise ValueError(
            f"network=sale builds TD7's encoders, actor and critic (agent=td7), not a network by input and output "
            f"size as this agent asks for its {name!r}; use network=mlp (or simba) with it."
        )

    def encoder(self, obs_dim: int, action_dim: int, name: str, like: Encoder | None = None) -> Encoder:
        """Both encoders (`<name>_zs`, `<name>_zsa`); with `like`, holding its weights."""
        enc = Encoder(self.state_encoder(obs_dim, f"{name}_zs"), self.state_action_encoder(action_dim, f"{name}_zsa"))
        for mine, theirs in zip(enc, like or ()):
            mine.set_weights(theirs.get_weights())
        return enc

    def state_encoder(self, obs_dim: int, name: str) -> keras.Model:
        """f(s) -> zs: two hidden layers, then AvgL1Norm on the output."""
        obs = keras.Input((obs_dim,), name=f"{name}_obs")
        x = self._hidden(obs, obs_dim, self.encoder_hidden, self.encoder_activation, name)
        zs = dense(self.zs_dim, self.encoder_hidden, self.init, name=f"{name}_out")(x)
        return keras.Model(obs, AvgL1Norm(name=f"{name}_norm")(zs), name=name)

    def state_action_encoder(self, action_dim: int, name: str) -> keras.Model:
        """g(zs, a) -> zsa, on [zs, a] concatenated: two hidden layers and a linear output."""
        zs_a = keras.Input((self.zs_dim + action_dim,), name=f"{name}_zs_action")
        x = self._hidden(zs_a, self.zs_dim + action_dim, self.encoder_hidden, self.encoder_activation, name)
        return keras.Model(zs_a, dense(self.zs_dim, self.encoder_hidden, self.init, name=f"{name}_out")(x), name=name)

    def actor(self, obs_dim: int, action_dim: int, name: str, embeddings: bool = True) -> keras.Model:
        """pi(s, zs) in [-1, 1]: AvgL1Norm(l0(s)), then [that, zs] through two hidden layers and tanh."""
        h, act = self.actor_hidden, self.actor_activation
        obs = keras.Input((obs_dim,), name=f"{name}_obs")
        inputs, x = [obs], AvgL1Norm(name=f"{name}_norm")(dense(h, obs_dim, self.init, name=f"{name}_l0")(obs))
        if embeddings:
            zs = keras.Input((self.zs_dim,), name=f"{name}_zs")
            inputs.append(zs)
            x = keras.layers.Concatenate(name=f"{name}_cat")([x, zs])
        x = dense(h, int(x.shape[-1]), self.init, activation=act, name=f"{name}_l1")(x)
        x = dense(h, h, self.init, activation=act, name=f"{name}_l2")(x)
        out = dense(action_dim, h, self.init, activation="tanh", name=f"{name}_out")(x)
        return keras.Model(inputs if embeddings else obs, out, name=name)

    def critic(self, obs_dim: int, action_dim: int, name: str, embeddings: bool = True) -> keras.Model:
        """Two heads Q(s, a, zsa, zs) -> (B, 2), each AvgL1Norm(l0([s, a])) and [zsa, zs] through two
        hidden layers."""
        obs, action = keras.Input((obs_dim,), name=f"{name}_obs"), keras.Input((action_dim,), name=f"{name}_action")
        inputs = [obs, action]
        sa = keras.layers.Concatenate(name=f"{name}_sa")([obs, action])
        if embeddings:
            inputs += [keras.Input((self.zs_dim,), name=f"{name}_zsa"), keras.Input((self.zs_dim,), name=f"{name}_zs")]
            embedding = keras.layers.Concatenate(name=f"{name}_emb")(inputs[2:])
        heads = []
        for k in (1, 2):
            h, act, head = self.critic_hidden, self.critic_activation, f"{name}_q{k}"
            x = AvgL1Norm(name=f"{head}_norm")(dense(h, obs_dim + action_dim, self.init, name=f"{head}_l0")(sa))
            if embeddings:
                x = keras.layers.Concatenate(name=f"{head}_cat")([x, embedding])
            x = dense(h, int(x.shape[-1]), self.init, activation=act, name=f"{head}_l1")(x)
            x = dense(h, h, self.init, activation=act, name=f"{head}_l2")(x)
            heads.append(dense(1, h, self.init, name=f"{head}_out")(x))
        return keras.Model(inputs, keras.layers.Concatenate(name=f"{name}_q")(heads), name=name)

    def _hidden(self, x, fan_in: int, units: int, activation: str, name: str):
        for i in range(2):
            x = dense(units, fan_in if i == 0 else units, self.init, activation=activation, name=f"{name}_h{i}")(x)
        return x


def policy(actor: keras.Model, state_encoder: keras.Model | None, name: str) -> keras.Model:
    """obs -> actor(obs, state_encoder(obs)): one model of the two, sharing their weights (acting
    and export see one network). Without an encoder, the actor itself."""
    if state_encoder is None:
        return actor
    obs = keras.Input(actor.inputs[0].shape[1:], name=f"{name}_obs")
    return keras.Model(obs, actor([obs, state_encoder(obs)]), name=name)
