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
    def update_many(self, batches: Batch) -> dict[str, tf.Tensor]: ...  # K stacked batches, K updates
    def trackables(self) -> dict[str, Any]: ...


def compile_fn(fn: Callable, input_signature: list, mode: str) -> Callable:
    """Wrap `fn` for the chosen execution mode: eager (plain Python), graph (tf.function) or
    xla (tf.function with jit_compile). A fixed input_signature means one trace per run."""
    if mode == "eager":
        return lambda *args: fn(*tf.nest.map_structure(tf.convert_to_tensor, args))
    if mode == "graph":
        return ConcreteCall(tf.function(fn, input_signature=input_signature))
    if mode == "xla":
        return ConcreteCall(tf.function(fn, input_signature=input_signature, jit_compile=True))
    raise ValueError(f"compile must be one of {COMPILE_MODES}, got {mode!r}")


class ConcreteCall:
    """A tf.function with a fixed input signature, called through its one concrete function's
    flat entry point. With one signature there is one trace, so `tf.function.__call__`'s work on
    every call (binding the arguments to the signature, looking up the trace, checking and
    flattening the structure) buys nothing: skipping it saves about 1.5 ms of a TD3 update on Ant
    and 0.3 ms of a small DQN update here (benchmarks/README.md). The inputs are converted to the
    signature's dtypes, so a wrong dtype still fails loudly. `ConcreteCall._call_flat` is TF's
    private entry point (TF is pinned to 2.21.x); where it is missing the public call is used.
    Traced on the first call, as a tf.function is."""

    def __init__(self, function):
        self.function = function
        self._concrete = None
        self._flat_call = None

    def _trace(self) -> None:
        self._concrete = self.function.get_concrete_function()
        specs = tf.nest.flatten(self.function.input_signature)
        captured = self._concrete.captured_inputs
        flat_call = getattr(self._concrete, "_call_flat", None)
        inputs = self._concrete.inputs
        if flat_call is not None and len(specs) + len(captured) == len(inputs) and all(
            s.dtype == i.dtype for s, i in zip(specs, inputs)
        ):
            dtypes = [s.dtype for s in specs]
            self._flat_call = lambda args: flat_call(
                [tf.convert_to_tensor(x, dtype=d) for x, d in zip(tf.nest.flatten(args), dtypes)], captured
            )

    def __call__(self, *args):
        if self._concrete is None:
            self._trace()
        if self._flat_call is not None:
            return self._flat_call(args)
        return self._concrete(*tf.nest.map_structure(tf.convert_to_tensor, args))

    def get_concrete_function(self):
        if self._concrete is None:
            self._trace()
        return self._concrete

    def experimental_get_tracing_count(self) -> int:
        return self.function.experimental_get_tracing_count()


def batch_signature(obs_dim: int, action_spec: tf.TensorSpec) -> Batch:
    return Batch(
        obs=tf.TensorSpec([None, obs_dim], tf.float32, name="obs"),
        action=action_spec,
        reward=tf.TensorSpec([None], tf.float32, name="reward"),
        next_obs=tf.TensorSpec([None, obs_dim], tf.float32, name="next_obs"),
        discount=tf.TensorSpec([None], tf.float32, name="discount"),
        weight=tf.TensorSpec([None], tf.float32, name="weight"),
    )


def stacked(signature: Batch) -> Batch:
    """The signature of K batches stacked on a new leading axis (K unknown: traced once for any K)."""
    return Batch(*(tf.TensorSpec([None, *s.shape], s.dtype, name=f"{s.name}s") for s in signature))


def tf_seed(rng: np.random.Generator) -> int:
    """Draw a seed for TensorFlow's in-graph generator from the run's numpy generator."""
    return int(rng.integers(0, 2**31 - 1))


class CompiledAgent:
    """The mechanism every agent shares: one compiled update over a `Batch` (eager, graph or XLA,
    traced once), and acting without a TensorFlow call: each update also returns the weights of
    the acting network (actor or Q-network) as outputs of the same compiled call, and acting runs
    that network's forward pass in numpy on them, so it never uses stale weights. A network that
    is not a plain dense stack, or `fast_act=False`, acts through a tf.function instead.

    Subclasses call `_compile(...)` at the end of their constructor and implement `_update`."""

    def _compile(self, obs_dim: int, acting_net: keras.Model, action_spec: tf.TensorSpec, compile: str, fast_act: bool) -> None:
        if compile not in COMPILE_MODES:
            raise ValueError(f"compile must be one of {COMPILE_MODES}, got {compile!r}")
        self.compile_mode = compile
        self._acting_net = acting_net
        obs_spec = [tf.TensorSpec([None, obs_dim], tf.float32)]
        self._net_fn = compile_fn(lambda obs: acting_net(obs, training=False), obs_spec, compile)
        self._np_forward = dense_forward_fn(acting_net) if fast_act else None
        self._np_weights: list[np.ndarray] = []
        sizes = [int(np.prod(w.shape)) for w in acting_net.weights]
        ends = np.cumsum(sizes)
        self._weight_layout = [((int(e - n), int(e)), tuple(w.shape)) for e, n, w in zip(ends, sizes, acting_net.weights)]
        self.refresh_policy()
        signature = batch_signature(obs_dim, action_spec)
        self._update_fn = compile_fn(self._update_and_read_policy, [signature], compile)
        # traced on first use only
        self._update_many_fn = compile_fn(self._update_many_and_read_policy, [stacked(signature)], compile)

    def _forward(self, obs: np.ndarray) -> np.ndarray:
        """The acting network's output for a batch of observations, as numpy."""
        obs = np.asarray(obs, dtype=np.float32)
        if self._np_forward is not None:
            return self._np_forward(self._np_weights, obs)
        return self._net_fn(obs).numpy()

    def refresh_policy(self) -> None:
        """Re-read the acting network's weights for the numpy path; call after changing them
        outside `update` (e.g. restoring a checkpoint)."""
        if self._np_forward is not None:
            self._np_weights = [np.array(w) for w in self._acting_net.get_weights()]

    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        """One gradient update from a numpy batch; returns metrics as tensors, never logs."""
        metrics, weights = self._update_fn(batch)
        self._set_np_weights(weights)
        return {**metrics, **self._host_metrics()}

    def update_many(self, batches: Batch) -> dict[str, tf.Tensor]:
        """K gradient updates in one compiled call, the same as K calls of `update` in order:
        `batches` holds K batches stacked on a leading axis (K >= 1). One crossing into TensorFlow
        instead of K. Returns the last update's metrics, with `td_error` of all K batches
        concatenated (K*B, for prioritized replay)."""
        metrics, weights = self._update_many_fn(batches)
        self._set_np_weights(weights)
        return {**metrics, **self._host_metrics()}

    def _host_metrics(self) -> dict[str, float]:
        """Metrics kept outside the graph (e.g. DQN's epsilon), added to every update's."""
        return {}

    def _update_and_read_policy(self, batch: Batch):
        return self._update(batch), self._read_policy()

    def _read_policy(self) -> tf.Tensor:
        """The acting network's weights, flattened into one tensor (one read back to numpy, not
        one per weight). Ordered after the update's writes by automatic control dependencies."""
        if self._np_forward is None:
            return tf.zeros([0])
        return tf.concat([tf.reshape(v, [-1]) for v in self._acting_net.weights], axis=0)

    def _set_np_weights(self, flat: tf.Tensor) -> None:
        if self._np_forward is None:
            return
        flat = flat.numpy()
        self._np_weights = [flat[a:b].reshape(shape) for (a, b), shape in self._weight_layout]

    def _update_many_and_read_policy(self, batches: Batch):
        def update_nth(i, td_errors):
            metrics = self._update(Batch(*(x[i] for x in batches)))
            return metrics, td_errors.write(i, metrics.pop("td_error"))

        # the first update outside the loop gives the loop its metrics' structure
        k = tf.shape(batches.reward)[0]
        td_errors = tf.TensorArray(tf.float32, size=k, element_shape=tf.TensorShape([None]), infer_shape=False)
        metrics, td_errors = update_nth(0, td_errors)

        def body(i, _, td_errors):
            return (i + 1, *update_nth(i, td_errors))

        _, metrics, td_errors = tf.while_loop(lambda i, *_: i < k, body, (tf.constant(1), metrics, td_errors))
        metrics["td_error"] = td_errors.concat()
        return metrics, self._read_policy()

    def _update(self, batch: Batch) -> dict[str, tf.Tensor]:
        raise NotImplementedError

    @property
    def update_trace_count(self) -> int:
        """How many times the update has been traced (0 in eager mode)."""
        fn = self._update_fn
        return fn.experimental_get_tracing_count() if hasattr(fn, "experimental_get_tracing_count") else 0

    def update_graph(self):
        """The compiled update's graph (for TensorBoard), or None in eager mode. Traces with the
        fixed input signature without running an update."""
        fn = self._update_fn
        return fn.get_concrete_function().graph if hasattr(fn, "get_concrete_function") else None


class DeterministicActorAgent(CompiledAgent):
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
        self.obs_dim = int(obs_dim)
        self._low_np = np.asarray(action_low, dtype=np.float32)
        self._high_np = np.asarray(action_high, dtype=np.float32)
        self.action_dim = int(self._low_np.shape[0])
        self.low = tf.constant(self._low_np)
        self.high = tf.constant(self._high_np)
        self._half_np = (self._high_np - self._low_np) / 2.0
        self._mid_np = (self._high_np + self._low_np) / 2.0
        self.half_range = tf.constant(self._half_np)
        self.exploration_noise = float(exploration_noise)
        self._compile_args = (compile, fast_act)
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

    def _compile_update(self) -> None:
        """Called by TD3/DDPG once their critics exist."""
        action_spec = tf.TensorSpec([None, self.action_dim], tf.float32, name="action")
        self._compile(self.obs_dim, self.actor, action_spec, *self._compile_args)

    # --- acting -------------------------------------------------------------------------
    def _policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.actor(obs, training=False), self.low, self.high)

    def _target_policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.actor_target(obs, training=False), self.low, self.high)

    @staticmethod
    def _q(critic: keras.Model, obs: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
        """A critic's Q(s, a) for a batch, shape (B,)."""
        return tf.squeeze(critic(tf.concat([obs, action], axis=-1), training=True), axis=-1)

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions for a batch of observations; with `explore`, Gaussian noise of std
        `exploration_noise * half_range`, clipped to the action box."""
        action = self._forward(obs) * self._half_np + self._mid_np  # [-1, 1] onto [low, high]
        if explore:
            noise = self._rng.normal(0.0, self.exploration_noise, size=action.shape) * self._half_np
            action = np.clip(action + noise, self._low_np, self._high_np, out=action)
        return action.astype(np.float32, copy=False)

    def policy_module(self) -> tf.Module:
        """The deterministic policy as a standalone tf.Module (for a SavedModel): `module(obs)`
        maps a batch of observations to actions in the env's action box."""
        return _DeterministicPolicy(self.actor, self._low_np, self._high_np, self.obs_dim)


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
