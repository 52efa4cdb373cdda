"""MinAtar (Young & Tian 2019): five Atari games on a 10x10 grid, the pixel suite that fits a CPU.

Observations are the game's channels as uint8 images, 255 where a channel is on: images here are
uint8 in [0, 255], whatever their source, and a CNN scales them by 1/255. The game's defaults are
the paper's (sticky actions with probability 0.1, difficulty ramping, all six actions, no time
limit). The whole game state is saved by `saved_state` (its random state included), so a run
resumes mid-episode exactly.
"""
from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np

GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
# one colour per channel for videos (a game has 4 to 10 channels); the background is black
PALETTE = np.array([[230, 60, 60], [60, 200, 80], [70, 110, 240], [240, 200, 50], [200, 80, 220], [60, 210, 220],
                    [250, 140, 40], [160, 160, 160], [140, 90, 50], [255, 255, 255]], np.uint8)
SCALE = 16  # pixels per grid cell in a video frame (160 x 160)


def check_game(game: str) -> str:
    if game not in GAMES:
        raise ValueError(f"MinAtar has no game {game!r}; its games are {', '.join(GAMES)} (env.game=breakout)")
    return game


class MinAtarEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(self, game: str = "breakout", sticky_action_prob: float = 0.1, difficulty_ramping: bool = True,
                 render_mode: str | None = None):
        try:
            from minatar import Environment
        except ImportError as err:  # a project dependency: only a broken install lacks it
            raise gym.error.DependencyNotInstalled("MinAtar is not installed (uv sync installs it: minatar)") from err
        if not 0.0 <= float(sticky_action_prob) <= 1.0:
            raise ValueError(f"env.sticky_action_prob must lie in [0, 1], got {sticky_action_prob}")
        self.game = Environment(check_game(game), sticky_action_prob=float(sticky_action_prob),
                                difficulty_ramping=bool(difficulty_ramping))
        self.game.seed(0)  # one RandomState for the sticky actions and the game, as MinAtar's seed() shares it
        self.render_mode = render_mode
        self.action_space = gym.spaces.Discrete(self.game.num_actions())
        self.observation_space = gym.spaces.Box(0, 255, self.game.state_shape(), np.uint8)

    def _obs(self) -> np.ndarray:
        return self.game.state().astype(np.uint8) * np.uint8(255)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.game.seed(int(seed))
        self.game.reset()
        return self._obs(), {}

    def step(self, action):
        reward, terminal = self.game.act(int(action))
        return self._obs(), float(reward), bool(terminal), False, {}

    def render(self) -> np.ndarray | None:
        """The grid, each channel in its colour (the last channel on top), 16 pixels to a cell."""
        if self.render_mode != "rgb_array":
            return None
        state = self.game.state()
        image = np.zeros((*state.shape[:2], 3), np.uint8)
        for c in range(state.shape[-1]):
            image[state[..., c]] = PALETTE[c % len(PALETTE)]
        return np.repeat(np.repeat(image, SCALE, axis=0), SCALE, axis=1)

    # --- the state a checkpoint keeps (envs.state) -------------------------------------------
    def saved_state(self) -> dict[str, Any]:
        """The game's variables, its last action (sticky actions repeat it) and its random state."""
        name, keys, pos, has_gauss, cached = self.game.random.get_state()
        game = {k: copy.deepcopy(v) for k, v in vars(self.game.env).items() if k not in ("random", "channels",
                                                                                       "action_map")}
        return {"random": {"name": name, "keys": keys, "pos": int(pos), "has_gauss": int(has_gauss),
                           "cached": float(cached)},
                "last_action": int(self.game.last_action), "game": game}

    def restore_state(self, state: dict[str, Any]) -> None:
        r = state["random"]
        self.game.random.set_state((r["name"], np.asarray(r["keys"], np.uint32), r["pos"], r["has_gauss"], r["cached"]))
        self.game.env.random = self.game.random
        self.game.last_action = state["last_action"]
        for k, v in state["game"].items():
            setattr(self.game.env, k, copy.deepcopy(v))
