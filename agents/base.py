"""The Agent protocol and the pieces the deterministic actor-critic agents share.

Shared here: acting (deterministic policy plus Gaussian exploration noise), action bounds, and how
an update is compiled. Each algorithm writes its own update in its own module, so that changing
one never changes another by accident.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

import keras
import numpy as np
import tensorflow as tf

from agents import losses
from buffers.types import Batch
from networks.numpy_forward import dense_forward_fn

COMPILE_MODES = ("eager", "graph", "xla")


class Agent(Protocol):
    ACTION_KIND: str  # "continuous" or "discrete": which action spaces the agent accepts

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...
    def update(self, batch: Batch) -> dict[str, tf.Tensor]: ...
    def trackables(self) -> dict[str, Any]: ...


def compile_fn(fn: Callable, input_signature: list, mode: str) -> Callable:
    """Wrap `fn` for the chosen execution mode: eager (plain Python), graph (tf.function) or
    xla (tf.function with jit_compile). A fixed input_signature means one trace per run."""
    if mode == "eager":
        return fn
    if mode == "graph":
        return tf.function(fn, input_signature=input_signature)
    if mode == "xla":
        return tf.function(fn, input_signature=input_signature, jit_compile=True)
    raise ValueError(f"compile must be one of {COMPILE_MODES}, got {mode!r}")


def batch_signature(obs_dim: int, action_spec: tf.TensorSpec) -> Batch:
    return Batch(
        obs=tf.TensorSpec([None, obs_dim], tf.float32, name="obs"),
        action=action_spec,
        reward=tf.TensorSpec([None], tf.float32, name="reward"),
        next_obs=tf.TensorSpec([None, obs_dim], tf.float32, name="next_obs"),
        discount=tf.TensorSpec([None], tf.float32, name="discount"),
        weight=tf.TensorSpec([None], tf.float32, name="weight"),
    )


def tf_seed(rng: np.random.Generator) -> int:
    """Draw a seed for TensorFlow's in-graph generator from the run's numpy generator."""
    return int(rng.integers(0, 2**31 - 1))


class DeterministicActorAgent:
    """State and acting shared by DDPG and TD3: a tanh actor scaled to the action box."""

    ACTION_KIND = "continuous"

    def __init__(
        self,
        obs_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        network: Callable[..., keras.Model],
        rng: np.random.Generator,
        actor_lr: float,
        exploration_noise: float,
        compile: str,
        fast_act: bool = True,
    ):
        if compile not in COMPILE_MODES:
            raise ValueError(f"compile must be one of {COMPILE_MODES}, got {compile!r}")
        self.obs_dim = int(obs_dim)
        self._low_np = np.asarray(action_low, dtype=np.float32)
        self._high_np = np.asarray(action_high, dtype=np.float32)
        self.action_dim = int(self._low_np.shape[0])
        self.low = tf.constant(self._low_np)
        self.high = tf.constant(self._high_np)
        self.half_range = tf.constant((self._high_np - self._low_np) / 2.0)
        self.exploration_noise = float(exploration_noise)
        self.compile_mode = compile
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))

        self.actor = network(self.obs_dim, self.action_dim, output_activation="tanh", name="actor")
        self.actor_target = network(
            self.obs_dim, self.action_dim, output_activation="tanh", name="actor_target"
        )
        self.actor_target.set_weights(self.actor.get_weights())
        self.actor_optimizer = keras.optimizers.Adam(learning_rate=actor_lr)
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")

        self._act_fn = compile_fn(
            self._policy, [tf.TensorSpec([None, self.obs_dim], tf.float32)], compile
        )
        # Fast path: act in numpy on a copy of the actor's weights that every update hands back
        # as outputs of its compiled call, so acting never uses stale weights and costs no
        # TensorFlow call. None when the actor is not a plain dense stack (then act via TF).
        self._np_forward = dense_forward_fn(self.actor) if fast_act else None
        self._np_weights: list[np.ndarray] = []
        self.refresh_policy()

    # --- acting -------------------------------------------------------------------------
    def _policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.actor(obs, training=False), self.low, self.high)

    def _target_policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.actor_target(obs, training=False), self.low, self.high)

    def refresh_policy(self) -> None:
        """Re-read the actor's weights for the numpy fast path; call after changing them outside
        `update` (e.g. restoring a checkpoint)."""
        if self._np_forward is not None:
            self._np_weights = [np.array(w) for w in self.actor.get_weights()]

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions for a batch of observations; with `explore`, Gaussian noise of std
        `exploration_noise * half_range`, clipped to the action box."""
        if self._np_forward is not None:
            squashed = self._np_forward(self._np_weights, np.asarray(obs, dtype=np.float32))
            action = self._low_np + (squashed + 1.0) * 0.5 * (self._high_np - self._low_np)
        else:
            action = self._act_fn(tf.convert_to_tensor(obs, dtype=tf.float32)).numpy()
        if explore:
            half = (self._high_np - self._low_np) / 2.0
            noise = self._rng.normal(0.0, self.exploration_noise, size=action.shape) * half
            action = np.clip(action + noise, self._low_np, self._high_np)
        return action.astype(np.float32)

    # --- updating -----------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        """One gradient update from a numpy batch; returns metrics as tensors, never logs."""
        metrics, actor_weights = self._update_fn(Batch(*(tf.convert_to_tensor(x) for x in batch)))
        if self._np_forward is not None:
            self._np_weights = [w.numpy() for w in actor_weights]
        return metrics

    @property
    def update_trace_count(self) -> int:
        """How many times the update has been traced (0 in eager mode)."""
        fn = self._update_fn
        return fn.experimental_get_tracing_count() if hasattr(fn, "experimental_get_tracing_count") else 0

    def policy_module(self) -> tf.Module:
        """The deterministic policy as a standalone tf.Module (for a SavedModel): `module(obs)`
        maps a batch of observations to actions in the env's action box."""
        return _DeterministicPolicy(self.actor, self._low_np, self._high_np, self.obs_dim)

    def update_graph(self):
        """The compiled update's graph (for TensorBoard), or None in eager mode. Traces with the
        fixed input signature without running an update."""
        fn = self._update_fn
        return fn.get_concrete_function().graph if hasattr(fn, "get_concrete_function") else None

    def _compile_update(self) -> None:
        sig = batch_signature(self.obs_dim, tf.TensorSpec([None, self.action_dim], tf.float32, name="action"))
        self._update_fn = compile_fn(self._update_and_read_actor, [sig], self.compile_mode)

    def _update_and_read_actor(self, batch: Batch):
        metrics = self._update(batch)
        # Reads ordered after the update's writes by tf.function's automatic control dependencies.
        actor = [tf.identity(v) for v in self.actor.weights] if self._np_forward is not None else []
        return metrics, actor

    def _update(self, batch: Batch) -> dict[str, tf.Tensor]:
        raise NotImplementedError


class _DeterministicPolicy(tf.Module):
    def __init__(self, actor: keras.Model, low: np.ndarray, high: np.ndarray, obs_dim: int):
        super().__init__(name="policy")
        self.actor = actor
        self.low = tf.constant(low)
        self.high = tf.constant(high)
        self.__call__ = tf.function(
            self._call, input_signature=[tf.TensorSpec([None, obs_dim], tf.float32, name="obs")]
        )

    def _call(self, obs):
        return losses.scale_action(self.actor(obs, training=False), self.low, self.high)
