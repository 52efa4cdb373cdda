"""What the loops, evaluation and export drive (`Learner`: an agent with its update compiled and its
acting on the weights the update hands back), and how an update is compiled: eager, graph or XLA,
and a graph called through its one trace."""
from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np
import tensorflow as tf

from agents.base import Agent
from agents.replay import Block, Transitions
from buffers.types import Batch

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

    def learn(self, buffer, batch_size: int, k: int) -> dict[str, tf.Tensor]:
        """K updates on K batches drawn from `buffer`; their priorities go back to it."""

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


COMPILE_MODES = ("eager", "graph", "xla")


def compile_fn(fn: Callable, input_signature: list, mode: str) -> Callable:
    """`fn` for the chosen execution mode: eager (plain Python), graph (tf.function) or xla
    (tf.function with jit_compile). A fixed input_signature means one trace per run. Without
    autograph: the updates branch and loop with tf.cond and tf.while_loop, so converting their
    Python source on every trace (a second or more of each first update) buys nothing, and a Python
    `if` on a tensor fails at the trace instead of being converted quietly."""
    if mode == "eager":
        return lambda *args: fn(*tf.nest.map_structure(tf.convert_to_tensor, args))
    if mode in ("graph", "xla"):
        return ConcreteCall(tf.function(fn, input_signature=input_signature, jit_compile=mode == "xla",
                                        autograph=False))
    raise ValueError(f"compile must be one of {COMPILE_MODES}, got {mode!r}")


class ConcreteCall:
    """A tf.function with a fixed input signature, called through its one concrete function's
    flat entry point. With one signature there is one trace, so `tf.function.__call__`'s work on
    every call (binding the arguments, looking up the trace, checking and flattening the
    structure) buys nothing: skipping it saves about 1.5 ms of a TD3 update on Ant
    (labs/log.md). The inputs are converted to the signature's dtypes, as the public call
    converts them. `_call_flat` is TF's private entry point (TF is pinned to 2.21.x); where it is
    missing the public call is used, and tests/test_fast_paths.py fails to say the time is lost.
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


def graph_of(fn):
    """The graph of a compiled function's one trace (traced, not run), or None for an eager one."""
    return fn.get_concrete_function().graph if hasattr(fn, "get_concrete_function") else None


def tracing_count(fn) -> int:
    """How many times a compiled function has been traced (0 for an eager one)."""
    return fn.experimental_get_tracing_count() if hasattr(fn, "experimental_get_tracing_count") else 0
