"""The protocol an algorithm implements (`Agent`), and the small helpers the algorithms share.

`Agent` is what an algorithm file implements: its networks, its hyper-parameters, one update of
plain batch maths, and acting. It never compiles, logs, writes files or steps an env. What the
loops drive is a `Learner` (agents/compiling.py): the agent with its update compiled
(`agents.compiled`), where the speed settings apply, around the maths, never threaded through it.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Protocol

import keras
import numpy as np
import tensorflow as tf

from agents import checks
from agents.acting import Forward
from agents.needs import Needs
from buffers.types import Batch, obs_shape_of


def check_keras_backend(backend: str) -> None:
    """The agents are TensorFlow code: refuse Keras running on another backend, naming the fix."""
    if backend != "tensorflow":
        raise ImportError(
            f"the agents are TensorFlow code, but Keras loaded its {backend!r} backend (from KERAS_BACKEND or "
            f"~/.keras/keras.json). Set KERAS_BACKEND=tensorflow before Keras is imported, as train.py and "
            f"evaluate.py do (training.runtime.prepare_process)."
        )


check_keras_backend(keras.backend.backend())


def vector_obs(obs_shape, agent: str) -> int:
    """The size of a vector observation (a shape of one axis, or a size), or a ValueError naming
    what takes images."""
    shape = obs_shape_of(obs_shape)
    if len(shape) != 1:
        raise ValueError(f"{agent} takes vector observations, but this env's are images of shape {shape}. Image "
                         f"observations train with agent=mrq, or with agent=dqn, td3, ddpg or sac and a convolutional "
                         f"network (network=nature_cnn, minatar_cnn or impala_cnn); or pick an env with vector observations.")
    return shape[0]


def network_input(obs_shape) -> int | tuple[int, ...]:
    """What an observation network is built on: a vector's size, or an image's shape (H, W, C)."""
    shape = obs_shape_of(obs_shape)
    return shape[0] if len(shape) == 1 else shape


def critic_network(network: Callable[..., keras.Model], obs_in: int | tuple[int, ...], action_dim: int, name: str,
                   **kwargs) -> keras.Model:
    """Q(s, a) for vectors of `obs_in` (the action concatenated to them) or images of shape
    `obs_in` (the action joined after the convolutions)."""
    if isinstance(obs_in, tuple):
        return network(obs_in, 1, name=name, action_dim=action_dim, **kwargs)
    return network(obs_in + action_dim, 1, name=name, **kwargs)


def critic_input(obs: tf.Tensor, action: tf.Tensor):
    """A critic's input for Q(s, a): the two concatenated for vectors; for images the pair, which
    the convolutional critic joins after its convolutions (`networks.cnn`)."""
    return [obs, action] if len(obs.shape) == 4 else tf.concat([obs, action], axis=-1)


class Agent(Protocol):
    ACTION_KIND: ClassVar[str]  # "continuous" or "discrete": which action spaces the agent accepts
    needs: Needs  # what it asks of the runner beyond this protocol (most agents: Needs())
    acting: Forward  # the network acting runs, in numpy on the weights each update hands back
    obs_shape: tuple[int, ...]  # one observation's: (obs_dim,) for vectors, (H, W, C) for images
    action_spec: tf.TensorSpec  # a batch's action column: (B, action_dim) float32 or (B,) int32

    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        """One update from one batch, in plain TensorFlow (compiled from outside). Returns metrics
        as tensors; `td_error` is per sample (for prioritized replay)."""

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions for a batch of observations, through `self.acting`."""

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        """The deterministic (evaluation) action in TensorFlow, for export; uses `acting.network` only."""

    def host_metrics(self) -> dict[str, float]:
        """Metrics kept outside the graph (DQN's epsilon), added to every update's."""

    # A checkpoint holds what `tracked(agent)` finds among its attributes: networks, targets,
    # optimizers, counters, in-graph generators. Keep them as attributes, under stable names.


class ActionBox:
    """A continuous action space's bounds: as numpy for acting, as tensors for the update."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        self.low_np, self.high_np = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.dim = int(self.low_np.shape[0])
        self.spec = tf.TensorSpec([None, self.dim], tf.float32, name="action")
        self.half_np, self.mid_np = (self.high_np - self.low_np) / 2.0, (self.high_np + self.low_np) / 2.0
        self.low, self.high, self.half_range = tf.constant(self.low_np), tf.constant(self.high_np), tf.constant(self.half_np)

    def from_unit(self, x: np.ndarray) -> np.ndarray:
        """Numpy values in [-1, 1] onto [low, high]."""
        return x * self.half_np + self.mid_np

    def to_unit(self, action: tf.Tensor) -> tf.Tensor:
        """Actions in [low, high] onto [-1, 1], as tensors."""
        return (action - (self.high + self.low) / 2.0) / self.half_range


class Counter(tf.train.experimental.PythonState):
    """A Python int saved in TensorFlow checkpoints (read at save time, so never stale): a schedule's
    clock advanced on the host every env step, where a tf.Variable would cost an op each time."""

    def __init__(self):
        self.value = 0

    def serialize(self) -> str:
        return str(self.value)

    def deserialize(self, string_value) -> None:
        self.value = int(string_value)


CHECKPOINTED = (tf.Variable, keras.Model, keras.optimizers.Optimizer, tf.random.Generator,
                tf.train.experimental.PythonState)


def tracked(agent) -> dict[str, Any]:
    """What a checkpoint holds of `agent`, found the way tf.Module finds its variables: every
    attribute TensorFlow checkpoints (variables, networks, optimizers, in-graph generators, Python
    state), and every NamedTuple of networks as `<name>_<field>`, under the attribute's name
    without its leading underscore. An object reached twice is kept under its first name; what an
    agent keeps elsewhere (a Forward's copy of a network's weights, lists of variables) is not held."""
    found, seen = {}, set()
    for name, value in vars(agent).items():
        parts = value._asdict().items() if isinstance(value, tuple) and hasattr(value, "_asdict") else [(None, value)]
        for field, obj in parts:
            if isinstance(obj, CHECKPOINTED) and id(obj) not in seen:
                seen.add(id(obj))
                found[name.lstrip("_") + (f"_{field}" if field else "")] = obj
    return found


def copy_of(online: keras.Model, target: keras.Model) -> keras.Model:
    """`target` (a network of the same shape) holding `online`'s weights: a target network."""
    target.set_weights(online.get_weights())
    return target


def tf_seed(rng: np.random.Generator) -> int:
    """Draw a seed for TensorFlow's in-graph generator from the run's numpy generator."""
    return int(rng.integers(0, 2**31 - 1))


def check_tau(tau: float) -> float:
    """A Polyak rate: in (0, 1] (1 copies the online network)."""
    return checks.number(tau, "tau", "in (0, 1] (0.005 moves the targets 0.5% a step)", lambda x: 0.0 < x <= 1.0)
