"""Fill one replay buffer with Atari-shaped transitions and report the memory it holds.

    uv run python benchmarks/replay_fill.py --impl tfrl --transitions 1000000
    benchmarks/.venv-sbx/bin/python benchmarks/replay_fill.py --impl sb3 --transitions 100000

Run by `benchmarks/memory.py --replay` (which runs both and compares), one buffer per process, so
that the resident memory the kernel reports (RssAnon, before and after the fill) is the buffer's.
The frames are random bytes in episodes of `--episode-length` steps, stacked as an Atari env
stacks them (the last 4 of 84x84, a reset repeating the first): tfrl's buffer (buffers/uniform.py)
stores each frame once; SB3's ReplayBuffer stores each transition's stacked obs and next_obs, as
SB3's DQN does by default (optimize_memory_usage=False), or once with --sb3-optimize. Imports no
TensorFlow or PyTorch model code, so it runs in SB3's venv too.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H = W = 84
STACK = 4


def rss_anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_buffer(impl: str, capacity: int, optimize: bool):
    if impl == "tfrl":
        sys.path.insert(0, ROOT)
        from buffers.uniform import UniformReplay

        buf = UniformReplay(capacity, (H, W, STACK), 1, 0.99, np.random.default_rng(0), discrete_actions=True,
                            obs_dtype=np.uint8, frame_stack=STACK)
        return lambda obs, nxt, a, r, done: buf.add(obs[None], [a], [r], nxt[None], [done], [False])
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer

    space = gym.spaces.Box(0, 255, (STACK, H, W), np.uint8)  # SB3's DQN sees (C, H, W) after VecTransposeImage
    buf = ReplayBuffer(capacity, space, gym.spaces.Discrete(4), device="cpu", optimize_memory_usage=optimize,
                       handle_timeout_termination=not optimize)
    return lambda obs, nxt, a, r, done: buf.add(np.moveaxis(obs, -1, 0)[None], np.moveaxis(nxt, -1, 0)[None],
                                                np.array([a]), np.array([r]), np.array([done]), [{}])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", choices=("tfrl", "sb3"), required=True)
    p.add_argument("--transitions", type=int, default=1_000_000, help="capacity, filled once")
    p.add_argument("--episode-length", type=int, default=1000)
    p.add_argument("--sb3-optimize", action="store_true", help="SB3's optimize_memory_usage=True")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 256, (4096, H, W, 1), dtype=np.uint8)  # frames drawn from a pool: filling stays fast
    add = make_buffer(args.impl, args.transitions, args.sb3_optimize)  # np.zeros: no page resident yet
    before = rss_anon_mb()  # after the imports and the pool, so the difference is the buffer's
    frames = []
    for t in range(args.transitions):
        if t % args.episode_length == 0:
            frames = [pool[rng.integers(len(pool))]] * STACK
        obs = np.concatenate(frames, axis=-1)
        frames = frames[1:] + [pool[rng.integers(len(pool))]]
        done = (t + 1) % args.episode_length == 0
        add(obs, np.concatenate(frames, axis=-1), int(rng.integers(4)), 0.0, done)
    after = rss_anon_mb()
    floor_mb = args.transitions * H * W / 2**20
    print(json.dumps({"impl": args.impl + ("-optimized" if args.sb3_optimize else ""), "transitions": args.transitions,
                      "episode_length": args.episode_length, "buffer_mb": round(after - before, 1),
                      "floor_mb": round(floor_mb, 1), "bytes_per_transition": round((after - before) * 2**20 /
                                                                                    args.transitions, 1),
                      "vs_floor": round((after - before) / floor_mb, 3)}))


if __name__ == "__main__":
    main()
