"""An agent with its update compiled (a `Learner`). The speed settings live here, around the
algorithm's maths: eager, graph or XLA (agents/compiling.py), K updates fused into one call (a
`tf.while_loop` over K stacked batches), the dtype of its matmuls, batch shards, and acting in
numpy on the weights each call hands back as one more output of the same call."""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from agents.augment import RandomShift
from agents.base import Agent, tracked
from agents.compiling import compile_fn, graph_of, tracing_count
from agents.replay import count, index, stacked
from buffers.types import Batch
from networks.normalization import RunningNormalizer
from networks.precision import check_precision, matmul_precision
from networks.sharding import batch_shards, check_shards


class CompiledAgent:
    """`agent` with its update compiled. `update(batches)` runs K >= 1 updates in one call (one
    traced function for K = 1, another, traced on first use, for K > 1) and hands the acting
    weights of the last one to the agent's `acting`. With `obs_norm` (running statistics), the
    agent sees normalized observations everywhere: in acting, in its updates' batches and in
    evaluation; `observe` adds the observations of training to the statistics. With
    `random_shift` (DrQ), each update's observations and next observations are shifted
    independently, in the graph."""

    def __init__(self, agent: Agent, compile: str = "graph", update_precision: str = "float32",
                 batch_shards: int = 1, numpy_acting: bool = True, obs_norm: RunningNormalizer | None = None,
                 random_shift: RandomShift | None = None):
        self.agent = agent
        self.obs_norm = obs_norm
        self.random_shift = random_shift
        self.compile_mode = compile
        self.update_precision = check_precision(update_precision)
        self.batch_shards = check_shards(batch_shards)
        for forward in self._forwards():
            forward.use_numpy(numpy_acting)
        self.replay = agent.needs.replay
        self.signature = self.replay.signature(agent.obs_shape, agent.action_spec, agent.acting.obs_dtype)
        self.block = agent.needs.block
        self.block_metrics: dict = {}  # the last block's, added to every update's metrics
        if self.block is not None:
            signature = [stacked(self.block.replay.signature(agent.obs_shape, agent.action_spec, agent.acting.obs_dtype)),
                         tf.TensorSpec([], tf.bool, name="start")]
            self._block = compile_fn(lambda draws, start: self._with_weights(self._block_updates(draws, start)),
                                     signature, compile)
        # one update as the loops over updates (K fused, the env steps driven from inside a graph
        # call: training.driven) call it: traced once, that trace also giving `metric_zeros` its
        # structure; XLA-compiled in xla mode, so that the driven steps get the fused update too
        self._body = self._update_in_context if compile == "eager" else self._traced_update(compile == "xla")
        self._metric_spec = None
        self._update_one = compile_fn(lambda b: self._with_weights(self._update_in_context(b)), [self.signature], compile)
        self._update_many = compile_fn(lambda bs: self._with_weights(self.step(bs, self.metric_zeros())),
                                       [stacked(self.signature)], compile)

    # --- the Learner protocol -------------------------------------------------------------
    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        return self.agent.act(obs if self.obs_norm is None else self.obs_norm(obs), explore)

    def observe(self, obs: np.ndarray) -> None:
        if self.obs_norm is not None:
            self.obs_norm.update(obs)

    def prepare(self, batches: Batch) -> Batch:
        if self.obs_norm is None:
            return batches
        return self.replay.map_obs(batches, self.obs_norm)

    def update(self, batches: Batch) -> dict[str, tf.Tensor]:
        batches = self.prepare(batches)
        if count(batches) == 1:
            metrics, weights = self._update_one(index(batches, 0))
        else:
            metrics, weights = self._update_many(batches)
        self.receive_weights(weights)
        return {**metrics, **self.extra_metrics()}

    def learn(self, buffer, batch_size: int, k: int) -> dict[str, tf.Tensor]:
        """K updates on K draws from `buffer` in one call, their TD errors back to it as priorities."""
        metrics = self.update(self.replay.draw(buffer, batch_size, k))
        buffer.update_priorities(metrics.pop("td_error", None))
        return metrics

    def extra_metrics(self) -> dict:
        """What each update's metrics carry beside the update's own: the last block's, the agent's host ones."""
        return {**self.block_metrics, **self.agent.host_metrics()}

    def run_block(self, draws, start: bool) -> None:
        """K >= 1 updates of the agent's block (`Needs.block`) in one call, on K stacked draws; with
        `start`, the block's first call, which begins with the agent's `start_block`."""
        metrics, weights = self._block(self.block.replay.map_obs(draws, self.obs_norm) if self.obs_norm else draws,
                                       np.bool_(start))
        self.receive_weights(weights)
        self.block_metrics = metrics

    def block_chunks(self, batch_size: int) -> list[int]:
        """How many draws each call of a block takes (`Block.chunks`)."""
        obs_bytes = int(np.prod(self.agent.obs_shape)) * tf.as_dtype(self.agent.acting.obs_dtype).size
        return self.block.chunks(batch_size, obs_bytes)

    def acting_weights(self) -> tf.Tensor:
        return self.agent.acting.flat_weights()

    def receive_weights(self, flat) -> None:
        self.agent.acting.receive(flat)

    def refresh(self) -> None:
        for forward in self._forwards():
            forward.refresh()

    def _forwards(self) -> list:
        """The agent's acting, and its evaluation acting where that is another network (TD7's checkpoint)."""
        evaluation = self.agent.needs.evaluation
        return [self.agent.acting] + ([evaluation] if evaluation is not None else [])

    def keep_policy(self) -> None:
        """The acting policy's weights become the evaluation policy's (`Needs.evaluation`)."""
        kept = self.agent.needs.evaluation
        for k, a in zip(kept.network.weights, self.agent.acting.network.weights, strict=True):
            k.assign(a)
        kept.refresh()

    def trackables(self) -> dict[str, Any]:
        return {**tracked(self.agent), **({"obs_norm": self.obs_norm} if self.obs_norm is not None else {}),
                **({"random_shift": self.random_shift.rng} if self.random_shift is not None else {})}

    # --- graph pieces ---------------------------------------------------------------------
    def _update_in_context(self, batch: Batch) -> dict[str, tf.Tensor]:
        """One update, traced with the speed settings that act from outside the maths."""
        if self.random_shift is not None:
            batch = self.replay.map_obs(batch, self.random_shift)
        with matmul_precision(self.update_precision), batch_shards(self.batch_shards):
            return self.agent.update(batch)

    def _block_updates(self, draws, start: tf.Tensor) -> dict[str, tf.Tensor]:
        """A block's `start_block` (with `start`), then one `block_update` per stacked draw, in
        order; the last one's metrics."""
        tf.cond(start, self.agent.start_block, lambda: tf.constant(False))

        def one(draw):
            if self.random_shift is not None:
                draw = self.block.replay.map_obs(draw, self.random_shift)
            with matmul_precision(self.update_precision), batch_shards(self.batch_shards):
                return self.agent.block_update(draw)

        metrics = one(index(draws, 0))
        _, metrics = tf.while_loop(lambda i, _: i < count(draws), lambda i, _: (i + 1, one(index(draws, i))),
                                   (tf.constant(1), metrics))
        return metrics

    def _traced_update(self, jit_compile: bool = False):
        """One update as a tf.function of the batch's signature (autograph off: see `compile_fn`)."""
        return tf.function(self._update_in_context, input_signature=[self.signature], jit_compile=jit_compile,
                           autograph=False)

    def _with_weights(self, metrics: dict) -> tuple[dict, tf.Tensor]:
        return metrics, self.acting_weights()

    def step(self, batches: Batch, metrics: dict) -> dict:
        """K >= 0 updates in the graph, in order, over K stacked batches (a `tf.while_loop`,
        traced once for any K). Returns the last update's metrics (`metrics` itself when K is 0),
        with `td_error` of all K batches concatenated."""
        k = count(batches)
        metrics = {name: m for name, m in metrics.items() if name != "td_error"}
        td_errors = tf.TensorArray(tf.float32, size=k, element_shape=tf.TensorShape([None]), infer_shape=False)

        def body(i, _, td_errors):
            metrics = self._body(index(batches, i))
            return i + 1, metrics, td_errors.write(i, metrics.pop("td_error"))

        _, metrics, td_errors = tf.while_loop(lambda i, *_: i < k, body, (tf.constant(0), metrics, td_errors))
        metrics["td_error"] = tf.cond(k > 0, td_errors.concat, lambda: tf.zeros([0]))
        return metrics

    def metric_zeros(self) -> dict[str, tf.Tensor]:
        """Zeros shaped like one update's metrics: the starting value of a loop over updates."""
        if self._metric_spec is None:
            # eager: a throwaway trace, never run
            fn = self._body if hasattr(self._body, "get_concrete_function") else self._traced_update()
            self._metric_spec = fn.get_concrete_function().structured_outputs
        return {k: tf.zeros([d or 0 for d in v.shape], v.dtype) for k, v in self._metric_spec.items()}

    # --- introspection --------------------------------------------------------------------
    def block_graph(self):
        """The compiled block's graph (`Needs.block`), or None without a block or in eager mode."""
        return graph_of(getattr(self, "_block", None))

    @property
    def update_trace_count(self) -> int:
        """How many times the single update has been traced (0 in eager mode)."""
        return tracing_count(self._update_one)

    def update_graph(self):
        """The compiled single update's graph (for TensorBoard; traced, not run), or None in eager mode."""
        return graph_of(self._update_one)
