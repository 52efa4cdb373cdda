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
from networks.precision import check_precision, matmul_precision

COMPILE_MODES = ("eager", "graph", "xla")


def check_keras_backend(backend: str) -> None:
    """The agents are TensorFlow code: refuse Keras running on another backend, naming the fix."""
    if backend != "tensorflow":
        raise ImportError(
            f"the agents are TensorFlow code, but Keras loaded its {backend!r} backend (from KERAS_BACKEND or "
            f"~/.keras/keras.json). Set KERAS_BACKEND=tensorflow before Keras is imported, as train.py and "
            f"evaluate.py do (training.runtime.prepare_process)."
        )


check_keras_backend(keras.backend.backend())


class UpdateSource(Protocol):
    """What `update_from` draws batches from: the training loop's env steps. Each call receives
    the TD errors of the batches it handed out the previous time (None if none, or on the first
    call), does whatever it needs (store priorities, act, step the envs, ...) and returns K
    batches stacked on a leading axis (or None for no update now) and whether to be called again.
    When it is called the agent already acts with the weights of the last update."""

    def __call__(self, td_error: np.ndarray | None) -> tuple[Batch | None, bool]: ...


class Agent(Protocol):
    ACTION_KIND: str  # "continuous" or "discrete": which action spaces the agent accepts

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...
    def update(self, batch: Batch) -> dict[str, tf.Tensor]: ...
    def update_many(self, batches: Batch) -> dict[str, tf.Tensor]: ...  # K stacked batches, K updates
    def update_from(self, source: UpdateSource) -> dict[str, tf.Tensor] | None: ...
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


def adam(learning_rate: float) -> keras.optimizers.Adam:
    """Adam with the reference implementations' (PyTorch's) epsilon 1e-8, Keras' default being 1e-7.
    Keras adds epsilon before the bias correction of the second moment, PyTorch after, so this is
    PyTorch's 1e-8 / sqrt(1 - beta_2**t): 3.2e-7 at the first update, 1e-8 in the limit."""
    return keras.optimizers.Adam(learning_rate=learning_rate, epsilon=1e-8)


def check_shards(batch_shards: int) -> int:
    if isinstance(batch_shards, bool) or not isinstance(batch_shards, (int, np.integer)) or batch_shards < 1:
        raise ValueError(f"batch_shards must be a positive integer, got {batch_shards!r}")
    return int(batch_shards)


def split(x: tf.Tensor, n: int) -> list[tf.Tensor]:
    """`x` cut into `n` equal parts along its first axis (n = 1: `[x]`, no op)."""
    return [x] if n == 1 else tf.split(x, n)


def shard_batch(batch: Batch, n: int) -> list[Batch]:
    """A batch cut into `n` equal shards (`batch_shards`). An update that runs its forward and
    backward passes shard by shard and averages the shards' mean losses has the full batch's loss
    and gradients (up to float summation order), but each shard's ops form a chain of their own,
    which graph mode's inter-op threads run side by side, one per core, instead of splitting every
    matmul across the cores."""
    return [Batch(*parts) for parts in zip(*(split(x, n) for x in batch))]


def shard_mean(values: list[tf.Tensor]) -> tf.Tensor:
    """The full batch's mean from the equal shards' means."""
    return values[0] if len(values) == 1 else tf.add_n(values) / len(values)


def unshard(values: list[tf.Tensor]) -> tf.Tensor:
    """Per-sample values of the shards, back in the batch's order."""
    return values[0] if len(values) == 1 else tf.concat(values, axis=0)


def tf_seed(rng: np.random.Generator) -> int:
    """Draw a seed for TensorFlow's in-graph generator from the run's numpy generator."""
    return int(rng.integers(0, 2**31 - 1))


class CompiledAgent:
    """The mechanism every agent shares: one compiled update over a `Batch` (eager, graph or XLA,
    traced once), and acting without a TensorFlow call: each update also returns the weights of
    the acting network (actor or Q-network) as outputs of the same compiled call, and acting runs
    that network's forward pass in numpy on them, so it never uses stale weights. A network that
    is not a plain dense stack, or `fast_act=False`, acts through a tf.function instead.
    `update_precision` is the dtype of the update's matmuls (`networks.precision`); acting is
    float32 either way.

    Subclasses call `_compile(...)` at the end of their constructor and implement `_update`."""

    def _compile(
        self, obs_dim: int, acting_net: keras.Model, action_spec: tf.TensorSpec, compile: str, fast_act: bool,
        update_precision: str = "float32",
    ) -> None:
        if compile not in COMPILE_MODES:
            raise ValueError(f"compile must be one of {COMPILE_MODES}, got {compile!r}")
        self.compile_mode = compile
        self.update_precision = check_precision(update_precision)
        self._acting_net = acting_net
        obs_spec = [tf.TensorSpec([None, obs_dim], tf.float32)]
        self._net_fn = compile_fn(lambda obs: acting_net(obs, training=False), obs_spec, compile)
        self._np_forward = dense_forward_fn(acting_net) if fast_act else None
        self._np_weights: list[np.ndarray] = []
        sizes = [int(np.prod(w.shape)) for w in acting_net.weights]
        ends = np.cumsum(sizes)
        self._weight_layout = [((int(e - n), int(e)), tuple(w.shape)) for e, n, w in zip(ends, sizes, acting_net.weights)]
        self.refresh_policy()
        self._signature = signature = batch_signature(obs_dim, action_spec)
        self._metric_spec = None
        self._update_fn = compile_fn(self._update_and_read_policy, [signature], compile)
        # traced on first use only
        self._update_many_fn = compile_fn(self._update_many_and_read_policy, [stacked(signature)], compile)
        # The graph driver needs numpy acting: a source acting through TF from inside a running
        # graph could wait on the threads that graph holds.
        self._drive_fn = compile_fn(self._drive, [], "graph") if compile == "graph" and self._np_forward is not None else None
        self._source: UpdateSource | None = None  # set during update_from only
        self._source_error: BaseException | None = None
        self._td_pending, self._source_updates, self._source_host_metrics = False, 0, {}
        self._no_batches = Batch(*(np.zeros([0, 0, *s.shape[1:]], s.dtype.as_numpy_dtype) for s in signature))

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
        return self._update_in_precision(batch), self._read_policy()

    def _update_in_precision(self, batch: Batch) -> dict[str, tf.Tensor]:
        with matmul_precision(self.update_precision):
            return self._update(batch)

    def _read_policy(self) -> tf.Tensor:
        """The acting network's weights, flattened into one tensor (one read back to numpy, not
        one per weight). Ordered after the update's writes by automatic control dependencies."""
        if self._np_forward is None:
            return tf.zeros([0])
        return tf.concat([tf.reshape(v, [-1]) for v in self._acting_net.weights], axis=0)

    def _set_np_weights(self, flat) -> None:
        if self._np_forward is None:
            return
        # a tensor's own numpy view, or a copy of an array that TF may reuse (tf.numpy_function)
        flat = flat.numpy() if isinstance(flat, tf.Tensor) else np.array(flat)
        self._np_weights = [flat[a:b].reshape(shape) for (a, b), shape in self._weight_layout]

    def _update_many_and_read_policy(self, batches: Batch):
        return self._run_updates(batches, self._metric_zeros()), self._read_policy()

    def _run_updates(self, batches: Batch, metrics: dict) -> dict:
        """K >= 0 updates in the graph, in order, over K batches stacked on a leading axis (a
        `tf.while_loop`, traced once for any K). Returns the last update's metrics (`metrics`
        itself when K is 0), with `td_error` of all K batches concatenated."""
        k = tf.shape(batches.reward)[0]
        metrics = {name: m for name, m in metrics.items() if name != "td_error"}
        td_errors = tf.TensorArray(tf.float32, size=k, element_shape=tf.TensorShape([None]), infer_shape=False)

        def body(i, _, td_errors):
            metrics = self._update_in_precision(Batch(*(x[i] for x in batches)))
            return i + 1, metrics, td_errors.write(i, metrics.pop("td_error"))

        _, metrics, td_errors = tf.while_loop(lambda i, *_: i < k, body, (tf.constant(0), metrics, td_errors))
        metrics["td_error"] = tf.cond(k > 0, td_errors.concat, lambda: tf.zeros([0]))
        return metrics

    def _metric_zeros(self) -> dict[str, tf.Tensor]:
        """Zeros shaped like one update's metrics: the starting value of a loop over updates."""
        if self._metric_spec is None:
            fn = self._update_fn
            if not hasattr(fn, "get_concrete_function"):  # eager: trace a throwaway graph
                fn = tf.function(self._update_and_read_policy, input_signature=[self._signature])
            self._metric_spec = fn.get_concrete_function().structured_outputs[0]
        return {k: tf.zeros([d or 0 for d in v.shape], v.dtype) for k, v in self._metric_spec.items()}

    # --- the env loop driven from inside the graph --------------------------------------
    def update_from(self, source: UpdateSource) -> dict[str, tf.Tensor] | None:
        """Updates on the batches `source` hands out, until it says stop. In graph mode (with
        numpy acting) the whole exchange is one compiled call: a `tf.while_loop` that reaches
        `source` through `tf.numpy_function` and runs the updates in the graph, so the fixed cost
        of entering TensorFlow is paid once per call instead of once per update phase. Other
        modes run the same exchange from Python. See `UpdateSource` for the contract.

        Returns the last update's metrics, or None if `source` handed out no batches. Their
        `td_error` (the last batches', for prioritized replay) is present only if it has not
        already gone to `source`."""
        self._source, self._source_error = source, None
        self._td_pending, self._source_updates = False, 0
        try:
            if self._drive_fn is not None:
                metrics, weights = self._drive_fn()
                self._set_np_weights(weights)
            else:
                metrics = self._drive_from_python()
        except tf.errors.OpError:
            if self._source_error is not None:  # the source's own error, not TF's wrapping of it
                raise self._source_error from None
            raise
        finally:
            self._source = None
        if not self._source_updates:
            return None
        if not self._td_pending:
            metrics = {k: v for k, v in metrics.items() if k != "td_error"}
        return {**metrics, **self._source_host_metrics}

    def _drive(self):
        signature = stacked(self._signature)
        dtypes = [s.dtype for s in signature] + [tf.bool]

        def body(_, metrics, weights):
            *batches, more = tf.numpy_function(self._call_source, [weights, metrics["td_error"]], dtypes, stateful=True)
            batches = Batch(*(tf.ensure_shape(x, s.shape) for x, s in zip(batches, signature)))
            metrics = self._run_updates(batches, metrics)
            return tf.ensure_shape(more, []), metrics, self._read_policy()

        start = (tf.constant(True), self._metric_zeros(), self._read_policy())
        shapes = (tf.TensorShape([]), {k: v.shape for k, v in self._metric_spec.items()}, start[2].shape)
        _, metrics, weights = tf.while_loop(lambda more, *_: more, body, start, shape_invariants=shapes)
        return metrics, weights

    def _drive_from_python(self):
        metrics, more = None, True
        while more:  # _call_source reads the TD errors only when its last batches were updated on
            *batches, more = self._call_source(None, metrics["td_error"] if metrics is not None else None)
            if len(batches[0]):
                metrics = self.update_many(Batch(*batches))
        return metrics

    def _call_source(self, weights, td_error):
        """One exchange with the source: the acting weights of the last update (None: already
        set) and the TD errors of the batches it handed out last; returns its next batches (K
        may be 0) and whether to call it again."""
        try:
            if weights is not None:
                self._set_np_weights(weights)
            batches, more = self._source(np.array(td_error) if self._td_pending else None)
        except BaseException as err:
            self._source_error = err
            raise
        self._td_pending = batches is not None and len(batches.reward) > 0
        if self._td_pending:
            self._source_updates += len(batches.reward)
            self._source_host_metrics = self._host_metrics()  # as of these updates, as `update` has them
        else:
            batches = self._no_batches
        return (*batches, np.bool_(more))

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
        batch_shards: int = 1,
        update_precision: str = "float32",
    ):
        self.obs_dim = int(obs_dim)
        self.batch_shards = check_shards(batch_shards)
        self._low_np = np.asarray(action_low, dtype=np.float32)
        self._high_np = np.asarray(action_high, dtype=np.float32)
        self.action_dim = int(self._low_np.shape[0])
        self.low = tf.constant(self._low_np)
        self.high = tf.constant(self._high_np)
        self._half_np = (self._high_np - self._low_np) / 2.0
        self._mid_np = (self._high_np + self._low_np) / 2.0
        self.half_range = tf.constant(self._half_np)
        self.exploration_noise = float(exploration_noise)
        self._compile_args = (compile, fast_act, update_precision)
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))

        self.actor = network(self.obs_dim, self.action_dim, output_activation="tanh", name="actor")
        self.actor_target = network(
            self.obs_dim, self.action_dim, output_activation="tanh", name="actor_target"
        )
        self.actor_target.set_weights(self.actor.get_weights())
        self.actor_optimizer = adam(actor_lr)
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


class ExportedPolicy(tf.Module):
    """A policy as a standalone tf.Module: `module(obs)` maps a batch of float32 observations to
    actions, here and after `tf.saved_model.save`/`load` (which keeps the function traced for
    any batch size). `signatures()` gives the `serving_default` signature (input `obs`, output
    `action`) that TF Serving, `saved_model_cli` and other languages' loaders call.
    Subclasses set their networks and implement `_act`."""

    def __init__(self, obs_dim: int):
        super().__init__(name="policy")
        self._obs_spec = tf.TensorSpec([None, obs_dim], tf.float32, name="obs")

    def trace(self) -> "ExportedPolicy":
        self.__call__.get_concrete_function(self._obs_spec)
        return self

    def signatures(self) -> dict:
        serve = tf.function(lambda obs: {"action": self._act(obs)}, input_signature=[self._obs_spec])
        return {"serving_default": serve.get_concrete_function()}

    @tf.function(reduce_retracing=True)
    def __call__(self, obs):
        return self._act(obs)

    def _act(self, obs: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError


class _DeterministicPolicy(ExportedPolicy):
    def __init__(self, actor: keras.Model, low: np.ndarray, high: np.ndarray, obs_dim: int):
        super().__init__(obs_dim)
        self.actor = actor
        self.low = tf.constant(low)
        self.high = tf.constant(high)
        self.trace()

    def _act(self, obs):
        return losses.scale_action(self.actor(obs, training=False), self.low, self.high)
