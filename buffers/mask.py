"""MR.Q's sampling mask (facebookresearch/MRQ buffer.py), for a buffer's rows: a row may be
sampled once `horizon` later rows of its episode are stored, or once its episode terminated (the
update masks what a run holds past a termination); never in the last `horizon` rows of an episode
cut by a time limit, nor in the newest `horizon` rows of one still running. Every value batch and
run of `horizon` steps from an open row is then whole, and no return is cut short by a time limit.
"""
from __future__ import annotations

import numpy as np


def check_horizon(horizon) -> int:
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0:
        raise ValueError(f"buffer.mask_horizon must be an integer >= 0 (0: every stored transition may be sampled; "
                         f"H: only those with H later steps of their episode stored, as MR.Q's author's buffer), "
                         f"or auto (agent=mrq: its longest horizon), got {horizon!r}")
    return horizon


class HorizonMask:
    def __init__(self, capacity: int, horizon: int):
        self.horizon = check_horizon(horizon)
        self.open = np.zeros(capacity, bool)  # whether each row may be sampled
        self._episode_steps = np.zeros(0, np.int64)  # per env: rows of its current episode stored

    def add(self, idx: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """After rows `idx` were written (one per env, envs interleaved): they are hidden; the row
        `horizon` steps back in each env's episode opens; a termination opens its episode's last
        rows, a truncation leaves them hidden. Returns the rows opened."""
        h, n = self.horizon, len(idx)
        if len(self._episode_steps) != n:
            self._episode_steps = np.zeros(n, np.int64)
        steps = self._episode_steps
        steps += 1
        self.open[idx] = False
        opened = [idx[steps > h] - h * n]
        opened += [idx[e] - n * np.arange(min(steps[e], h)) for e in np.flatnonzero(terminated)]
        opened = np.concatenate(opened) % len(self.open)
        self.open[opened] = True
        steps[terminated | truncated] = 0
        return opened

    def none_open(self, size: int) -> ValueError:
        """The error of a draw that finds no open row."""
        return ValueError(f"the replay buffer holds no transition with {self.horizon} later steps of its episode "
                          f"stored ({size} transitions, buffer.mask_horizon={self.horizon}); start learning later "
                          f"(learning_starts) or set buffer.mask_horizon=0")

    def cut(self) -> None:
        """Every env's episode ends here, cut: its last rows stay hidden, as a truncation's."""
        self._episode_steps[:] = 0

    def state_dict(self, size: int) -> dict[str, np.ndarray]:
        return {"sampleable": self.open[:size].copy(), "episode_steps": self._episode_steps.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.open[:] = False
        self.open[: len(state["sampleable"])] = state["sampleable"]
        self._episode_steps = np.array(state["episode_steps"], np.int64)
