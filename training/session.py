"""What every training loop shares, whatever it trains: the progress bar, the wall clock over a run's
sessions, evaluation (and the checkpoint of the best), the stop request and the periodic checkpoint
between iterations, and the end of a session (its last evaluation, its checkpoint, its summary).

A loop (training/loop.py's off-policy loop, training/evolution.py's generations) owns what differs:
how it steps the envs and learns, what it logs. Its state is a dataclass with at least the fields
`Session` reads (below); hooks reach the outside world (`LoopHooks`)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
from tqdm.auto import tqdm

from training.evaluation import Acts, evaluate
from training.loggers import Logger


@dataclass
class LoopHooks:
    """How the outside world takes part: `checkpoint(state, kind)` with kind periodic|best|stop|final,
    and `stop_requested()` polled once per iteration (a signal arrived)."""

    checkpoint: Callable[[Any, str], None] = lambda state, kind: None
    stop_requested: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class Evaluation:
    """How a loop evaluates: `episodes` deterministic episodes of `policy` on `env`, its first reset
    seeded with `seed` every time, every `every` env steps; `epsilon`: random actions (Atari's protocol)."""

    policy: Acts
    env: gym.Env
    every: int
    episodes: int
    seed: int
    epsilon: float = 0.0


class Session:
    """One session of a run, from its state (`step`, `next_eval`, `next_checkpoint`, `best_return`,
    `last_eval`, `evals`, `wall_time`) to `total_steps` or a stop request."""

    def __init__(self, state, total_steps: int, evaluation: Evaluation, checkpoint_every: int, logger: Logger,
                 hooks: LoopHooks | None, progress: bool):
        self.state, self.total_steps, self.evaluation = state, total_steps, evaluation
        self.checkpoint_every, self.logger, self.hooks = checkpoint_every, logger, hooks or LoopHooks()
        # disable=None: the bar shows on a terminal and stays out of redirected logs
        self.bar = tqdm(total=total_steps, initial=min(state.step, total_steps), disable=None if progress else True,
                        unit="step", dynamic_ncols=True, smoothing=0.05)
        self.t_start, self.wall_before = time.perf_counter(), state.wall_time
        self.stopped = False

    def wall_time(self) -> float:
        """Seconds in the loop over all sessions of the run."""
        return self.wall_before + time.perf_counter() - self.t_start

    def advance(self, steps: int) -> None:
        self.state.step += steps
        self.bar.update(min(steps, self.total_steps - self.bar.n))

    def evaluate(self, **record) -> None:
        """An evaluation, logged with `record`; the checkpoint of the best when it is the best so far."""
        st, e = self.state, self.evaluation
        result = evaluate(e.policy, e.env, e.episodes, seed=e.seed, epsilon=e.epsilon)
        st.last_eval = result
        st.evals.append((st.step, result["return_mean"]))
        self.logger.log("eval", st.step, {**result, **record, "wall_time": self.wall_time()})
        self.bar.set_postfix(eval_return=f"{result['return_mean']:.1f}")
        if result["return_mean"] > st.best_return:
            st.best_return = result["return_mean"]
            self.hooks.checkpoint(st, "best")

    def stop_requested(self) -> bool:
        """A stop request before the end (at the end the run finishes: its evaluation, its summary)."""
        self.stopped = self.hooks.stop_requested() and self.state.step < self.total_steps
        return self.stopped

    def checkpoint_due(self) -> bool:
        st = self.state
        return 0 < st.next_checkpoint <= st.step < self.total_steps

    def periodic_checkpoint(self) -> None:
        st = self.state
        while st.next_checkpoint <= st.step:
            st.next_checkpoint += self.checkpoint_every
        st.wall_time = self.wall_time()
        self.hooks.checkpoint(st, "periodic")

    def finish(self, **record) -> dict:
        """The session's end: the last evaluation (not after a stop), its checkpoint, its summary."""
        st = self.state
        if not self.stopped:
            self.evaluate(**record)
            while st.next_eval <= st.step:  # an extended run does not evaluate this step again
                st.next_eval += self.evaluation.every
        self.bar.close()
        st.wall_time = self.wall_time()
        self.hooks.checkpoint(st, "stop" if self.stopped else "final")
        return {
            "stopped": self.stopped,
            "steps": st.step,
            "final_return": st.last_eval["return_mean"] if st.last_eval else float("nan"),
            **({"final_success_rate": st.last_eval["success_rate"]} if st.last_eval and "success_rate" in st.last_eval else {}),
            "best_return": st.best_return,
            "wall_time": st.wall_time,
            "steps_per_second": st.step / st.wall_time if st.wall_time > 0 else float("nan"),
        }

