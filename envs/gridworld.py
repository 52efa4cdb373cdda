"""The Gridworld of "Deep Reinforcement Learning in Action" (Zai & Brown), chapter 3, as a
gymnasium env.

A size x size board (4 by default) with four pieces: the player, a goal (+10, episode ends), a pit
(-10, episode ends) and a wall; every other move costs -1. Actions 0-3 move up, down, left, right;
a move into the wall or off the board leaves the player where it is (and still costs -1).
The observation is the board as four one-hot planes (player, goal, pit, wall), flattened to
4*size*size and, as in the book, plus uniform noise in [0, noise) (noise=0 turns it off). With
`pixels`, the planes are an image instead: (size, size, 4) uint8, 255 where a piece is (no noise).

Modes, as the book's: `static` (player (0,3), goal (0,0), pit (0,1), wall (1,1)); `player` (the
static board with the player placed at random on a free square); `random` (all four pieces at
random, drawn again until the board is valid).

Where this follows or fixes the book:
- Reaching the pit *terminates* the episode here. The book's training loop also stops on the pit,
  but its replay targets treat only the goal as terminal (`done` is true only when reward > 0), so
  its pit transitions bootstrap past the end of the game; here the TD target does not.
- The book validates random boards with a corner check that uses `board.size` instead of
  `board.size - 1` (so only (0,0) is tested as a corner) and only asks whether the player and the
  goal can make some move. Here a board is valid when the pieces are on distinct squares and the
  goal is reachable from the player by moves that avoid the wall and the pit (a breadth-first
  search), which is what that check was meant to ensure.
- `info["is_success"]` is True when the player reached the goal; evaluation reports the win rate
  from it. The book's win rate counts games won within 15 moves: use a time limit of 15 for
  evaluation (the gridworld env config does, `env.eval_max_episode_steps=15`).
"""
from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np

MODES = ("static", "player", "random")
PIECES = ("player", "goal", "pit", "wall")
MOVES = {0: (-1, 0), 1: (1, 0), 2: (0, -1), 3: (0, 1)}  # up, down, left, right
STATIC = {"player": (0, 3), "goal": (0, 0), "pit": (0, 1), "wall": (1, 1)}


class GridworldEnv(gym.Env):
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, mode: str = "static", size: int = 4, noise: float = 0.1, render_mode: str | None = None,
                 pixels: bool = False):
        if mode not in MODES:
            raise ValueError(f"Gridworld mode must be one of {', '.join(MODES)}, got {mode!r}; set env.mode=static|player|random.")
        if not isinstance(size, (int, np.integer)) or size < 4:
            raise ValueError(f"Gridworld size must be an integer >= 4 (the static layout needs a 4x4 board), got {size!r}; set env.kwargs.size=4.")
        if noise < 0:
            raise ValueError(f"Gridworld noise must be >= 0, got {noise}")
        if pixels and noise > 0:
            raise ValueError(f"Gridworld noise is added to vector observations; with pixels the planes are an image of "
                             f"bytes: set env.kwargs.noise=0 (got {noise}).")
        self.mode, self.size, self.noise, self.pixels = mode, int(size), float(noise), bool(pixels)
        self.render_mode = render_mode
        n = len(PIECES) * self.size * self.size
        self.observation_space = (gym.spaces.Box(0, 255, (self.size, self.size, len(PIECES)), np.uint8) if pixels else
                                  gym.spaces.Box(0.0, 1.0 + self.noise, shape=(n,), dtype=np.float32))
        self.action_space = gym.spaces.Discrete(4)
        self.pos: dict[str, tuple[int, int]] = {}

    # --- board ---------------------------------------------------------------------------
    def _random_square(self) -> tuple[int, int]:
        return tuple(int(v) for v in self.np_random.integers(0, self.size, size=2))

    def _place(self) -> dict[str, tuple[int, int]]:
        if self.mode == "static":
            return dict(STATIC)
        if self.mode == "player":
            pos = dict(STATIC)
            while (p := self._random_square()) in {pos["goal"], pos["pit"], pos["wall"]}:
                pass
            pos["player"] = p
            return pos
        while True:
            pos = {name: self._random_square() for name in PIECES}
            if valid_board(pos, self.size):
                return pos

    def _obs(self) -> np.ndarray:
        planes = np.zeros((len(PIECES), self.size, self.size), dtype=np.float32)
        for i, name in enumerate(PIECES):
            planes[(i, *self.pos[name])] = 1.0
        if self.pixels:
            return (planes.transpose(1, 2, 0) * 255).astype(np.uint8)
        obs = planes.reshape(-1)
        if self.noise > 0:
            obs = obs + self.np_random.random(obs.shape[0]).astype(np.float32) * self.noise
        return obs

    # --- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = self._place()
        return self._obs(), {}

    def step(self, action):
        dr, dc = MOVES[int(action)]
        r, c = self.pos["player"]
        new = (r + dr, c + dc)
        if 0 <= new[0] < self.size and 0 <= new[1] < self.size and new != self.pos["wall"]:
            self.pos["player"] = new
        won = self.pos["player"] == self.pos["goal"]
        lost = self.pos["player"] == self.pos["pit"]
        reward = 10.0 if won else -10.0 if lost else -1.0
        return self._obs(), reward, won or lost, False, {"is_success": won}

    def render(self) -> str:
        grid = [[" " for _ in range(self.size)] for _ in range(self.size)]
        for name, mark in zip(("wall", "pit", "goal", "player"), ("W", "-", "+", "P")):
            r, c = self.pos[name]
            grid[r][c] = mark
        return "\n".join("".join(row) for row in grid)


def valid_board(pos: dict[str, tuple[int, int]], size: int) -> bool:
    """Distinct squares, and the goal reachable from the player avoiding the wall and the pit."""
    if len(set(pos.values())) < len(pos):
        return False
    blocked = {pos["wall"], pos["pit"]}
    seen, queue = {pos["player"]}, deque([pos["player"]])
    while queue:
        r, c = queue.popleft()
        if (r, c) == pos["goal"]:
            return True
        for dr, dc in MOVES.values():
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in blocked and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return False
