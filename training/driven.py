"""Env steps driven from inside one compiled call (`speed.steps_per_call`).

The loop's per-phase path enters TensorFlow once per update phase. Here one compiled call runs a
`tf.while_loop` whose body reaches the loop's `source` (act, step the envs, store, sample) through
`tf.numpy_function` and then runs the learner's compiled step on the batches drawn for it, so the
fixed cost of entering TensorFlow is paid once per call instead. The steps, batches and updates
are the same as the per-phase path's.

The `numpy_function` is a host op: on a GPU every env step would be a round trip to the host, so
`speed.steps_per_call=auto` turns this off there.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import tensorflow as tf

from agents.compiling import Learner
from agents.replay import flatten, stacked
from buffers.types import Buffer

HOST_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")  # the driver's deliberate host round trip


class Source(Protocol):
    """The training loop's env steps, as the driver calls them: each call steps the envs until
    updates are due (or its stretch ends) and returns how many updates to run now (0: none) and
    whether to be called again. When it is called the agent already acts with the weights of the
    last update, and the buffer holds the priorities of the batches it last drew."""

    def __call__(self) -> tuple[int, bool]: ...


class GraphDriver:
    def __init__(self, learner: Learner):
        self.learner = learner
        self._signature = stacked(learner.signature)
        self._fn = tf.function(self._drive, input_signature=[], autograph=False)
        self._no_batches = tf.nest.map_structure(lambda s: np.zeros([d or 0 for d in s.shape], s.dtype.as_numpy_dtype),
                                                 self._signature)
        self._source: Source | None = None
        self._source_error: BaseException | None = None
        self._td_pending, self._updates, self._host_metrics = False, 0, {}

    def run(self, source: Source, buffer: Buffer, batch_size: int) -> dict[str, tf.Tensor] | None:
        """Updates on batches drawn from `buffer`, as many each time as `source` says are due, until
        it says stop; each batch's priorities (TD errors) go back to `buffer` before the next draw.
        Returns the last update's metrics, or None if `source` asked for no updates."""
        self._source, self._source_error, self._buffer, self._batch_size = source, None, buffer, batch_size
        self._td_pending, self._updates = False, 0
        try:
            metrics, weights = self._fn()
            self.learner.receive_weights(weights)
        except tf.errors.OpError:
            if self._source_error is not None:  # the source's own error, not TF's wrapping of it
                raise self._source_error from None
            raise
        finally:
            self._source = self._buffer = None
        if not self._updates:
            return None
        metrics = dict(metrics)
        td_error = metrics.pop("td_error")
        if self._td_pending:  # the last batches' errors, which no later call has handed back
            buffer.update_priorities(np.asarray(td_error))
        return {**metrics, **self._host_metrics}

    def graph(self):
        return self._fn.get_concrete_function().graph

    def _drive(self):
        specs = tf.nest.flatten(self._signature)
        dtypes = [s.dtype for s in specs] + [tf.bool]
        zeros = self.learner.metric_zeros()
        learner = self.learner

        def body(_, metrics, weights):
            *batches, more = tf.numpy_function(self._call_source, [weights, metrics["td_error"]], dtypes, stateful=True)
            batches = tf.nest.pack_sequence_as(self._signature, [tf.ensure_shape(x, s.shape) for x, s in zip(batches, specs)])
            metrics = learner.step(batches, metrics)
            return tf.ensure_shape(more, []), metrics, learner.acting_weights()

        start = (tf.constant(True), zeros, learner.acting_weights())
        shapes = (tf.TensorShape([]), {k: tf.TensorShape([None] * v.shape.rank) for k, v in zeros.items()}, start[2].shape)
        _, metrics, weights = tf.while_loop(lambda more, *_: more, body, start, shape_invariants=shapes)
        return metrics, weights

    def _call_source(self, weights, td_error):
        """One exchange with the source: acting gets the weights of the last updates and the buffer
        the TD errors of the batches drawn last; then the source steps the envs, and the K batches
        of the updates it says are due are drawn (K may be 0). Returns them and whether to call again."""
        try:
            self.learner.receive_weights(weights)
            if self._td_pending:
                self._buffer.update_priorities(np.array(td_error))
            k, more = self._source()
            batches = self.learner.replay.draw(self._buffer, self._batch_size, k) if k else None
        except BaseException as err:
            self._source_error = err
            raise
        self._td_pending = batches is not None
        if self._td_pending:
            batches = self.learner.prepare(batches)
            self._updates += k
            self._host_metrics = self.learner.extra_metrics()  # as of these updates, as `update` has them
        else:
            batches = self._no_batches
        return (*flatten(batches), np.bool_(more))
