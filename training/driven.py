"""Env steps driven from inside one compiled call (`speed.steps_per_call`).

The loop's per-phase path enters TensorFlow once per update phase. Here one compiled call runs a
`tf.while_loop` whose body reaches the loop's `source` (act, step the envs, store, sample) through
`tf.numpy_function` and then runs the learner's compiled step on the batches it returns, so the
fixed cost of entering TensorFlow is paid once per call instead. The steps, batches and updates
are the same as the per-phase path's.

The `numpy_function` is a host op: on a GPU every env step would be a round trip to the host, so
`speed.steps_per_call=auto` turns this off there.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import tensorflow as tf

from agents.base import Learner
from agents.replay import count, flatten, stacked
from buffers.types import Batch

HOST_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")  # the driver's deliberate host round trip


class Source(Protocol):
    """What the driver draws batches from: the training loop's env steps. Each call receives the
    TD errors of the batches it handed out the previous time (None if none, or on the first call),
    does whatever it needs (store priorities, act, step the envs, ...) and returns K batches
    stacked on a leading axis (or None for no update now) and whether to be called again. When it
    is called the agent already acts with the weights of the last update."""

    def __call__(self, td_error: np.ndarray | None) -> tuple[Batch | None, bool]: ...


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

    def run(self, source: Source) -> dict[str, tf.Tensor] | None:
        """Updates on the batches `source` hands out, until it says stop. Returns the last update's
        metrics, or None if `source` handed out no batches. Their `td_error` (the last batches',
        for prioritized replay) is present only if it has not already gone to `source`."""
        self._source, self._source_error = source, None
        self._td_pending, self._updates = False, 0
        try:
            metrics, weights = self._fn()
            self.learner.receive_weights(weights)
        except tf.errors.OpError:
            if self._source_error is not None:  # the source's own error, not TF's wrapping of it
                raise self._source_error from None
            raise
        finally:
            self._source = None
        if not self._updates:
            return None
        if not self._td_pending:
            metrics = {k: v for k, v in metrics.items() if k != "td_error"}
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
        """One exchange with the source: the acting weights of the last updates and the TD errors
        of the batches it handed out last; returns its next batches (K may be 0) and whether to
        call it again."""
        try:
            self.learner.receive_weights(weights)
            batches, more = self._source(np.array(td_error) if self._td_pending else None)
        except BaseException as err:
            self._source_error = err
            raise
        self._td_pending = batches is not None and count(batches) > 0
        if self._td_pending:
            batches = self.learner.prepare(batches)
            self._updates += count(batches)
            self._host_metrics = self.learner.extra_metrics()  # as of these updates, as `update` has them
        else:
            batches = self._no_batches
        return (*flatten(batches), np.bool_(more))
