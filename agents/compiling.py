"""How an update is compiled: eager, graph or XLA, and a graph called through its one trace."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

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
    (benchmarks/README.md). The inputs are converted to the signature's dtypes, as the public call
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
