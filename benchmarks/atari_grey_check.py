"""Do envs/atari.py's frames match SB3's AtariWrapper's? Both skip 4 frames, take the max of the last
two and shrink to 84x84 grey with OpenCV's INTER_AREA; they differ in one order. gymnasium's
AtariPreprocessing (envs/atari.py) pools the emulator's grey screens, AtariWrapper (MaxAndSkipEnv,
then WarpFrame) pools the colour screens and greys the result. This plays seeded random actions and
builds each agent step's frame both ways from the same two emulator screens.

    uv run python benchmarks/atari_grey_check.py [--games Breakout Pong SpaceInvaders] [--steps 4000]
"""
from __future__ import annotations

import argparse

import cv2
import gymnasium as gym
import numpy as np


def frames_both_ways(game: str, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0)
    env.reset(seed=seed)
    ale, rng = env.unwrapped.ale, np.random.default_rng(seed)
    ours, sb3 = [], []
    last = (ale.getScreenRGB(), ale.getScreenGrayscale())
    for t in range(steps):
        env.step(int(rng.integers(env.action_space.n)))
        screens = (ale.getScreenRGB(), ale.getScreenGrayscale())
        if t % 4 == 3:  # the end of an agent step: its last two emulator frames
            ours.append(cv2.resize(np.maximum(last[1], screens[1]), (84, 84), interpolation=cv2.INTER_AREA))
            pooled = cv2.cvtColor(np.maximum(last[0], screens[0]), cv2.COLOR_RGB2GRAY)
            sb3.append(cv2.resize(pooled, (84, 84), interpolation=cv2.INTER_AREA))
        last = screens
    env.close()
    return np.stack(ours), np.stack(sb3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["Breakout", "Pong", "SpaceInvaders"])
    parser.add_argument("--steps", type=int, default=4000, help="emulator frames of random play per game")
    args = parser.parse_args()
    print("| game | agent steps | pixels that differ | largest difference (of 255) |")
    print("|---|---|---|---|")
    for game in args.games:
        ours, sb3 = frames_both_ways(game, args.steps)
        diff = np.abs(ours.astype(np.int16) - sb3.astype(np.int16))
        print(f"| {game} | {len(diff)} | {100 * (diff > 0).mean():.3f}% | {int(diff.max())} |")


if __name__ == "__main__":
    main()
