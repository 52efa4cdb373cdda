"""Atari 2600 games through the Arcade Learning Environment (ale-py, ROMs bundled), with the
standard DQN processing (Mnih et al. 2015, as Stable-Baselines3's AtariWrapper applies it):

    no-op starts (up to 30), frame skip 4 with the max of the last two frames, 84x84 grey
    (gymnasium's AtariPreprocessing) -> end of an episode at each lost life (training only: the game
    goes on) -> FIRE after a reset where the game needs it -> rewards clipped to their sign
    (training only) -> 4 frames stacked (env.frame_stack, envs/pixels.py)

A game is cut (truncated) at 108k emulator frames, 27k agent steps, by the emulator itself, so the
limit counts the whole game and not each life. The step that ends a game reports its score
(unclipped, all lives) in its info, which the training loop logs as `game_score`. Sticky actions
(Machado et al. 2018: the last action repeated with probability 0.25) are a setting, off by default
as in the DQN papers and SB3's zoo. Evaluation reports the game's score: conf/env/atari.yaml
turns life loss and reward clipping off for its episodes. The emulator's whole state (its RNG
included) is saved in checkpoints (`AleState`), so a run resumes mid-episode exactly.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def _ale():
    try:
        import ale_py
    except ImportError as err:  # a project dependency: only a broken install lacks it
        raise gym.error.DependencyNotInstalled("ale-py is not installed (uv sync installs it: ale-py)") from err
    return ale_py


# Bundled ROMs of two-player games that ale-py cannot load for one player: it ends the whole
# process instead of raising, so they are refused before it is asked.
TWO_PLAYER = frozenset({"combat", "joust", "maze_craze", "warlords"})


def _ids() -> dict[str, str]:
    """The ALE's games by the names env.game takes (TicTacToe3d -> tic_tac_toe_3d)."""
    return {"".join(part.capitalize() for part in rom.split("_")): rom
            for rom in _ale().roms.get_all_rom_ids() if rom not in TWO_PLAYER}


def games() -> list[str]:
    """The ALE's games, by the names env.game takes (Breakout, Pong, MontezumaRevenge, ...)."""
    return sorted(_ids())


def rom_id(game: str) -> str:
    """ALE's id of a game named as gymnasium names it (Breakout -> breakout, SpaceInvaders ->
    space_invaders), or given by that id."""
    ids = _ids()
    if game in ids or game in ids.values():
        return ids.get(game, game)
    import difflib

    close = difflib.get_close_matches(game, list(ids), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    two_player = str(game).lower().replace("_", "") in {t.replace("_", "") for t in TWO_PLAYER}
    what = (f"{game!r} is a two-player game, which it cannot run for one player." if two_player
            else f"has no game {game!r}.{hint}")
    raise ValueError(f"the Arcade Learning Environment {what} Its {len(ids)} one-player games "
                     f"(env.game=Breakout, Pong, ...): {', '.join(sorted(ids))}")


class AleState(gym.Wrapper):
    """The emulator's state as plain data (envs.state.OwnState): the ALE's serialized state, with
    its random state (sticky actions)."""

    def saved_state(self) -> dict[str, Any]:
        state = self.env.unwrapped.ale.cloneState(include_rng=True)
        return {"ale": np.frombuffer(state.serialize(), np.uint8).copy()}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.env.unwrapped.ale.restoreState(_ale().ALEState(np.asarray(state["ale"], np.uint8).tobytes()))


class GameScore(gym.Wrapper):
    """Counts each game's own score (every reward, unclipped, all lives) and length (agent steps,
    the resets' no-op and FIRE steps included) below the life-loss and clipping wrappers, and keeps
    the games that ended for `ReportGames` to hand out: a game may end inside a wrapper's reset
    step, whose info that wrapper does not pass on."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.score, self.length = 0.0, 0
        self.ended: tuple[float, int] | None = None  # (score, length) of a game not yet reported

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.score, self.length = self.score + float(reward), self.length + 1
        if terminated or truncated:
            self.ended = (self.score, self.length)
            self.score, self.length = 0.0, 0
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        self.score, self.length = 0.0, 0
        return self.env.reset(**kwargs)


class ReportGames(gym.Wrapper):
    """The outermost of an Atari env: the info of each step or reset after which a game has ended
    holds its `game_score` and `game_length` (where SB3's Monitor and CleanRL log the game's score,
    a training episode here is a life's clipped rewards)."""

    def __init__(self, env: gym.Env, games: GameScore):
        super().__init__(env)
        self._games = games

    def _report(self, info: dict) -> dict:
        if self._games.ended is None:
            return info
        (score, length), self._games.ended = self._games.ended, None
        return {**info, "game_score": score, "game_length": length}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._report(info)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._report(info)


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for the learner (terminated), but the game goes on: the next
    reset is a no-op step unless the game is over (SB3's EpisodicLifeEnv)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self.game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Actions 1 (FIRE) and 2 after a reset, for games that wait for FIRE to start (SB3's
    FireResetEnv). Only where action 1 is FIRE: Backgammon's and VideoCheckers' FIRE is action 0,
    and 1 and 2 there move."""

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class ClipReward(gym.RewardWrapper):
    """The sign of each reward (Mnih et al. 2015): training only."""

    def reward(self, reward):
        return float(np.sign(reward))


def make_atari(game: str = "Breakout", frame_skip: int = 4, noop_max: int = 30, screen_size: int = 84,
               sticky_action_prob: float = 0.0, terminal_on_life_loss: bool = True, clip_rewards: bool = True,
               fire_reset: bool = True, full_action_space: bool = False, render_mode: str | None = None,
               max_frames_per_episode: int | None = 108_000) -> gym.Env:
    """One Atari game with the processing above (without the frame stack, which env.frame_stack adds).
    `max_frames_per_episode` is the emulator's own time limit, in frames of one game: a truncation
    there reaches EpisodicLife, which then resets the game, where a TimeLimit on top would count
    each life apart and leave the game running (SB3's EpisodicLifeEnv takes truncation as game over
    for the same reason)."""
    ale = _ale()
    if not 0.0 <= float(sticky_action_prob) <= 1.0:
        raise ValueError(f"env.sticky_action_prob must lie in [0, 1] (0.25 in Machado et al. 2018), got {sticky_action_prob}")
    for key, value in (("frame_skip", frame_skip), ("screen_size", screen_size),
                       ("max_frames_per_episode", 1 if max_frames_per_episode is None else max_frames_per_episode)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"env.{key} must be a positive integer{' or null' if key.startswith('max') else ''}, "
                             f"got {value!r}")
    env = ale.env.AtariEnv(game=rom_id(game), frameskip=1, repeat_action_probability=float(sticky_action_prob),
                           full_action_space=bool(full_action_space), render_mode=render_mode,
                           max_num_frames_per_episode=max_frames_per_episode)
    meanings = env.unwrapped.get_action_meanings()
    if int(noop_max) > 0 and meanings[0] != "NOOP":
        raise ValueError(f"{game} has no NOOP action (its actions are {', '.join(meanings)}), and the no-op starts "
                         f"press action 0 as one; set env.kwargs.noop_max=0 to start its games without them")
    env = gym.wrappers.AtariPreprocessing(AleState(env), noop_max=int(noop_max), frame_skip=frame_skip,
                                          screen_size=screen_size, terminal_on_life_loss=False, grayscale_obs=True)
    env = games = GameScore(env)
    if terminal_on_life_loss:
        env = EpisodicLife(env)
    if fire_reset and meanings[1:2] == ["FIRE"] and len(meanings) >= 3:  # SB3's FireResetEnv's precondition
        env = FireReset(env)
    return ReportGames(ClipReward(env) if clip_rewards else env, games)
