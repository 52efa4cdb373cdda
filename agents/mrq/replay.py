"""What MR.Q's updates take from replay (`Needs.replay` and its `Block`'s): per update, a batch of
multi-step transitions for the value and policy and the buffer's mean absolute reward
(`ScaledTransitions`); per encoder update, runs of `horizon` consecutive steps and whether any stored
transition terminated (`Runs`); or, in the fused schedule, both in one update (`TransitionsAndRuns`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf

from agents.needs import Needs
from agents.replay import Block, Transitions, batch_signature
from buffers.types import Batch, Buffer, Sequences


class RunsBatch(NamedTuple):
    """MR.Q's inputs to one update: transitions for the value and policy, runs for the encoder, and
    the buffer's mean absolute reward and whether any stored transition terminated."""

    batch: Batch
    runs: Sequences
    reward_scale: np.ndarray  # () float32
    terminates: np.ndarray  # () float32: 1 once any stored transition has terminated


def _over_steps(fn: Callable, x):
    """`fn` on (B, H, ...) observations as (B * H, ...), reshaped back."""
    if isinstance(x, np.ndarray):
        return fn(x.reshape(-1, *x.shape[2:])).reshape(x.shape)
    shape = tf.shape(x)
    return tf.reshape(fn(tf.reshape(x, tf.concat([[-1], shape[2:]], 0))), shape)


@dataclass(frozen=True)
class TransitionsAndRuns(Transitions):
    """A Batch of n-step transitions and `horizon`-step runs (buffer.sample_sequences) per update,
    with the buffer's mean absolute reward and whether it holds a termination."""

    horizon: int
    n_step: int

    @property
    def mask_horizon(self) -> int:
        """`buffer.mask_horizon=auto`: the author's buffer masks by the longer of the two horizons."""
        return max(self.horizon, self.n_step)

    def signature(self, obs_shape: tuple[int, ...], action: tf.TensorSpec, obs_dtype) -> RunsBatch:
        return RunsBatch(
            batch=batch_signature(obs_shape, action, obs_dtype),
            runs=_runs_signature(obs_shape, action, obs_dtype, self.horizon),
            reward_scale=tf.TensorSpec([], tf.float32, name="reward_scale"),
            terminates=tf.TensorSpec([], tf.float32, name="terminates"),
        )

    def draw(self, buffer: Buffer, batch_size: int, k: int) -> RunsBatch:
        batch = buffer.sample_batches(batch_size, k)  # first: a prioritized buffer updates these batches' priorities
        return RunsBatch(batch, _draw_runs(buffer, batch_size, k, self.horizon),
                         np.full(k, buffer.mean_abs_reward(), np.float32),
                         np.full(k, float(buffer.any_terminated()), np.float32))

    def map_obs(self, batch: RunsBatch, fn: Callable) -> RunsBatch:
        return batch._replace(batch=super().map_obs(batch.batch, fn), runs=_map_runs(batch.runs, fn))

    def check(self, buffer: Buffer) -> None:
        _check_n_step(buffer, self.n_step)


class ScaledBatch(NamedTuple):
    """MR.Q's inputs to one update in its author's encoder schedule: transitions for the value and
    policy, and the buffer's mean absolute reward (the encoder trains in blocks: `Block`)."""

    batch: Batch
    reward_scale: np.ndarray  # () float32


class RunsDraw(NamedTuple):
    """The inputs of one encoder update of a block: runs, and whether any stored transition terminated."""

    runs: Sequences
    terminates: np.ndarray  # () float32


def _runs_signature(obs_shape: tuple[int, ...], action: tf.TensorSpec, obs_dtype, horizon: int) -> Sequences:
    steps = [None, horizon]
    return Sequences(
        obs=tf.TensorSpec([None, *obs_shape], obs_dtype, name="run_obs"),
        action=tf.TensorSpec(steps + list(action.shape[1:]), action.dtype, name="run_action"),
        reward=tf.TensorSpec(steps, tf.float32, name="run_reward"),
        next_obs=tf.TensorSpec(steps + list(obs_shape), obs_dtype, name="run_next_obs"),
        terminated=tf.TensorSpec(steps, tf.float32, name="run_terminated"),
    )


def _draw_runs(buffer: Buffer, batch_size: int, k: int, horizon: int) -> Sequences:
    runs = buffer.sample_sequences(batch_size * k, horizon)
    return Sequences(*(x.reshape(k, batch_size, *x.shape[1:]) for x in runs))


def _map_runs(runs: Sequences, fn: Callable) -> Sequences:
    return runs._replace(obs=fn(runs.obs), next_obs=_over_steps(fn, runs.next_obs))


def _check_n_step(buffer: Buffer, n_step: int) -> None:
    found = getattr(buffer, "n_step", None)
    if found != n_step:
        raise ValueError(f"the agent's value targets are {n_step}-step returns (agent.q_horizon={n_step}), "
                         f"but the buffer's are {found}-step (buffer.n_step={found}); leave buffer.n_step out of "
                         f"the command (agent=mrq sets it to agent.q_horizon).")


@dataclass(frozen=True)
class ScaledTransitions(Transitions):
    """A Batch of n-step transitions and the buffer's mean absolute reward per update."""

    horizon: int  # the runs' of the agent's blocks: with n_step, what `buffer.mask_horizon=auto` masks by
    n_step: int

    @property
    def mask_horizon(self) -> int:
        return max(self.horizon, self.n_step)

    def signature(self, obs_shape: tuple[int, ...], action: tf.TensorSpec, obs_dtype) -> ScaledBatch:
        return ScaledBatch(batch_signature(obs_shape, action, obs_dtype), tf.TensorSpec([], tf.float32, name="reward_scale"))

    def draw(self, buffer: Buffer, batch_size: int, k: int) -> ScaledBatch:
        return ScaledBatch(buffer.sample_batches(batch_size, k), np.full(k, buffer.mean_abs_reward(), np.float32))

    def map_obs(self, batch: ScaledBatch, fn: Callable) -> ScaledBatch:
        return batch._replace(batch=super().map_obs(batch.batch, fn))

    def check(self, buffer: Buffer) -> None:
        _check_n_step(buffer, self.n_step)


@dataclass(frozen=True)
class Runs(Transitions):
    """Runs of `horizon` steps (buffer.sample_sequences) per encoder update of a block."""

    horizon: int

    def signature(self, obs_shape: tuple[int, ...], action: tf.TensorSpec, obs_dtype) -> RunsDraw:
        return RunsDraw(_runs_signature(obs_shape, action, obs_dtype, self.horizon),
                        tf.TensorSpec([], tf.float32, name="terminates"))

    def draw(self, buffer: Buffer, batch_size: int, k: int) -> RunsDraw:
        return RunsDraw(_draw_runs(buffer, batch_size, k, self.horizon),
                        np.full(k, float(buffer.any_terminated()), np.float32))

    def map_obs(self, batch: RunsDraw, fn: Callable) -> RunsDraw:
        return batch._replace(runs=_map_runs(batch.runs, fn))

    def draw_bytes(self, batch_size: int, obs_bytes: int) -> int:
        """About what one draw's observations take (a run's first and next observations)."""
        return batch_size * (1 + self.horizon) * obs_bytes


def needs(settings) -> Needs:
    """What MR.Q's settings (agents.mrq.settings) take from replay: in the author's schedule the
    transitions per update and a block of encoder updates on runs at each target copy; fused, both
    per update."""
    horizon, n_step = settings.enc_horizon, settings.q_horizon
    if settings.blocks:
        every = settings.target_update_every
        return Needs(replay=ScaledTransitions(horizon, n_step), block=Block(every, every, Runs(horizon)))
    return Needs(replay=TransitionsAndRuns(horizon, n_step))
