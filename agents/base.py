"""The two protocols of agents/, and the small helpers the algorithms share.

- `Agent` is what an algorithm file implements: its networks, its hyper-parameters, one update
  of plain batch maths, and acting. It never compiles, logs, writes files or steps an env.
- `Learner` is what the training loop, evaluation and export drive: an agent with its update
  compiled and its acting on the weights the update hands back (`agents.compiled`). The speed
  settings are applied there, around the maths, never threaded through an algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Protocol

import keras
import numpy as np
import tensorflow as tf

from agents import checks
from agents.acting import Forward
from agents.replay import Block, Transitions
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
        raise ValueError(
            f"{agent} takes vector observations, but this env's are images of shape {shape}. Image observations "
            f"train with agent=dqn, td3, ddpg or sac and a convolutional network (network=nature_cnn, minatar_cnn "
            f"or impala_cnn), or pick an env with vector observations."
        )
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


@dataclass(frozen=True)
class PolicyCheckpoints:
    """TD7's policy checkpoints (sfujim/TD7's `maybe_train_and_checkpoint`; training/assessment.py
    runs them): the agent trains at episode ends; before it does, the policy that acted is kept as
    the evaluation policy if the lowest return of the episodes that assessed it (1, or `episodes`
    once `after` updates are done) was not below the kept one's, which is scaled by `reset_weight`
    at that point. An episode below it ends the assessment early."""

    episodes: int = 20
    after: int = 750_000
    reset_weight: float = 0.9

    def __post_init__(self):  # the settings are TD7's agent.checkpoint_* keys
        checks.integer(self.episodes, "checkpoint_episodes", "an integer >= 1 (20 in TD7)")
        checks.integer(self.after, "checkpoint_after", "an integer >= 1 (750000 in TD7)")
        checks.number(self.reset_weight, "checkpoint_reset_weight", "in (0, 1] (0.9 in TD7)", lambda x: 0 < x <= 1)


@dataclass(frozen=True)
class LapReplay:
    """The replay a LAP loss is defined on (Fujimoto et al. 2020): sampled by priorities floored
    at `min_priority`, no importance weights, the largest priority reset every `reset_every` updates."""

    min_priority: float
    reset_every: int


@dataclass(frozen=True)
class Needs:
    """What an agent asks of the runner beyond the Agent protocol, declared here and read by
    training/, never probed for:
    - `population`: trained by generations (training/evolution.py), not from replay (agents/ga.py);
    - `evaluation`: the network evaluation and export act with, when it is not `acting` (TD7's
      checkpoint policy); the runner copies `acting`'s weights into it when `policy_checkpoints` say so;
    - `policy_checkpoints`: train at episode ends and keep the best assessed policy (TD7);
    - `lap`: the critic loss is LAP's and needs LAP's replay (a LapReplay), or it is a squared
      error that LAP's replay would bias (False), or the agent has no view (None);
    - `replay`: what one update takes from replay (agents/replay.py): a Batch of transitions, or
      MR.Q's transitions and runs;
    - `block`: updates of one part run many in a row every so many updates, each on its own draw
      (agents/replay.py: MR.Q's encoder in its author's schedule), or None."""

    population: bool = False
    evaluation: Forward | None = None
    policy_checkpoints: PolicyCheckpoints | None = None
    lap: LapReplay | Literal[False] | None = None
    replay: Transitions = Transitions()
    block: Block | None = None


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


class Learner(Protocol):
    """What the loop, evaluation and export use (`agents.compiled.CompiledAgent`)."""

    agent: Agent
    replay: Transitions  # what an update takes from replay (the agent's `needs.replay`)

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...

    def observe(self, obs: np.ndarray) -> None:
        """Every observation of training, as it comes from the envs (for running statistics)."""

    def prepare(self, batches: Batch) -> Batch:
        """Host batches as the update takes them (observations normalized, where that is on);
        `update` does this itself, a caller of `step` does it first."""

    def update(self, batches: Batch) -> dict[str, tf.Tensor]:
        """K >= 1 updates in one compiled call over K batches stacked on a leading axis; the last
        update's metrics, with the `td_error` of all K batches (K*B)."""

    # The compiled step as graph code, for a caller's own compiled function (training.driven):
    signature: Batch  # of one batch
    def step(self, batches: Batch, metrics: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """K >= 0 updates over K stacked batches; `metrics` (shaped as `metric_zeros`) come back
        unchanged when K is 0."""

    def metric_zeros(self) -> dict[str, tf.Tensor]: ...

    def extra_metrics(self) -> dict:
        """What each update's metrics carry beside the update's own (the last block's, host metrics)."""

    block: Block | None  # the agent's `needs.block`
    def run_block(self, draws, start: bool) -> None:
        """K >= 1 updates of the agent's block over K stacked draws (`start`: the block's first call)."""

    def block_chunks(self, batch_size: int) -> list[int]:
        """How many draws each call of a block takes."""

    def acting_weights(self) -> tf.Tensor:
        """The acting network's weights as one flat tensor, read after the step's writes."""

    def receive_weights(self, flat) -> None:
        """Hand the weights `acting_weights` returned to acting."""

    def refresh(self) -> None:
        """Re-read the acting weights after a checkpoint restore."""

    def keep_policy(self) -> None:
        """Copy the acting policy into the one evaluation acts with (policy checkpoints)."""

    def trackables(self) -> dict[str, Any]: ...

    def update_graph(self):
        """The compiled update's graph (for TensorBoard), or None when it is not compiled."""


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


class _OneKernelAdam:
    """Adam's step by PyTorch's formula, the one every reference implementation trains with:
    epsilon added to sqrt(v) after its bias correction, where Keras adds it before, so Keras' step
    with epsilon * sqrt(1 - beta_2**t). (Keras' own 1e-8 acts as PyTorch's 1e-8 / sqrt(1 - beta_2**t),
    3.2e-7 at the first step: enough to move the first few thousand steps of weights whose gradients
    are that small, as MR.Q's policy's are; benchmarks/author_mrq_update_check.py.)

    A variable of `ONE_KERNEL_FROM` elements or more is stepped as one kernel (TensorFlow's
    ResourceApplyAdam, tf.keras 2's path) instead of eleven elementwise ops, each a pass over the
    variable: the same formula, with 1 - beta rounded in float32 where the ops round it from a
    double (steps differ in the last bit). Smaller variables take the ops: the kernel splits every
    variable across the intra-op threads whatever its size, which costs more than it saves on a
    small one (benchmarks/README.md, stop 53). amsgrad, which the kernel lacks, is Keras' own step."""

    ONE_KERNEL_FROM = 16384

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        m, v = self._momentums[index], self._velocities[index]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        beta_1_power, beta_2_power = tf.pow(beta_1, step), tf.pow(beta_2, step)
        lr, gradient = tf.cast(learning_rate, dtype), tf.cast(gradient, dtype)
        correction_2 = tf.sqrt(1 - beta_2_power)  # sqrt(v)'s bias correction
        epsilon = tf.cast(self.epsilon, dtype) * correction_2  # PyTorch's, in Keras' units
        if variable.shape.num_elements() >= self.ONE_KERNEL_FROM:
            handle = [(x.value if isinstance(x, keras.Variable) else x).handle for x in (variable, m, v)]
            return tf.raw_ops.ResourceApplyAdam(
                var=handle[0], m=handle[1], v=handle[2], beta1_power=beta_1_power, beta2_power=beta_2_power, lr=lr,
                beta1=beta_1, beta2=beta_2, epsilon=epsilon, grad=gradient, use_locking=False)
        alpha = lr * correction_2 / (1 - beta_1_power)
        self.assign_add(m, keras.ops.multiply(keras.ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, keras.ops.multiply(keras.ops.subtract(keras.ops.square(gradient), v), 1 - self.beta_2))
        self.assign_sub(variable, keras.ops.divide(keras.ops.multiply(m, alpha), keras.ops.add(keras.ops.sqrt(v), epsilon)))


class Adam(_OneKernelAdam, keras.optimizers.Adam):
    pass


class AdamW(_OneKernelAdam, keras.optimizers.AdamW):
    """Keras' decoupled weight decay (one pass over the variable before the step), then Adam's step."""


def adam(learning_rate: float, beta_1: float = 0.9) -> Adam:
    """Adam with the reference implementations' (PyTorch's) epsilon 1e-8, Keras' default being 1e-7,
    added where PyTorch adds it (see _OneKernelAdam)."""
    return Adam(learning_rate=learning_rate, beta_1=beta_1, epsilon=1e-8)


def adamw(learning_rate: float, weight_decay: float, variables: list) -> AdamW:
    """AdamW with PyTorch's epsilon (torch.optim.AdamW's, as `adam`), built for `variables`."""
    optimizer = AdamW(learning_rate=learning_rate, weight_decay=weight_decay, epsilon=1e-8)
    optimizer.build(variables)
    return optimizer


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
