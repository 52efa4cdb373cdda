"""Frames stored once (buffers/frames.py): every observation a sample can return is the one the env
gave, across episode ends, truncations, several envs and a ring that has wrapped."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from helpers import ROOT, evaluate, extended_run_ends_as_the_whole
from omegaconf import OmegaConf

from buffers.prioritized import PrioritizedReplay
from buffers.uniform import UniformReplay
from envs.factory import make_env
from training.config import ConfigError
from training.parts import build_buffer

H, W, C = 3, 2, 2


class Stream:
    """`envs` envs whose observations are the last `stack` random frames (H, W, C), padded with
    zeros at an episode's start (as SB3's frame stack pads: no repetition to lean on)."""

    def __init__(self, envs: int, stack: int, seed: int):
        self.rng, self.envs, self.stack = np.random.default_rng(seed), envs, stack
        self.history = [self._reset() for _ in range(envs)]

    def _reset(self):
        return [np.zeros((H, W, C), np.uint8)] * (self.stack - 1) + [self._frame()]

    def _frame(self):
        return self.rng.integers(1, 256, (H, W, C), dtype=np.uint8)

    def obs(self):
        return np.stack([np.concatenate(h[-self.stack:], axis=-1) for h in self.history])

    def step(self):
        """(obs, next_obs, terminated, truncated): next_obs is the real next observation (the
        final one at an episode's end), and the envs reset where an episode ended."""
        obs = self.obs()
        for h in self.history:
            h.append(self._frame())
        next_obs = self.obs()
        ended = self.rng.random(self.envs) < 0.15
        terminated = ended & (self.rng.random(self.envs) < 0.5)
        for i in np.flatnonzero(ended):
            self.history[i] = self._reset()
        return obs, next_obs, terminated, ended & ~terminated


def fill(buf, stream, steps):
    """Add `steps` steps; returns the obs and next_obs each row holds, as a plain copy would."""
    obs_at, next_at = {}, {}
    for _ in range(steps):
        obs, next_obs, terminated, truncated = stream.step()
        rows = (buf._cursor + np.arange(stream.envs)) % buf.capacity
        buf.add(obs, np.zeros((stream.envs, 1)), np.ones(stream.envs), next_obs, terminated, truncated)
        for r, o, n in zip(rows, obs, next_obs):
            obs_at[r], next_at[r] = o, n
    return obs_at, next_at


def sampleable(buf):
    if not buf._full:
        return list(range(len(buf)))
    skip = buf.unsampled()
    return [(buf._cursor + skip + i) % buf.capacity for i in range(len(buf) - skip)]


@pytest.mark.parametrize("stack,envs,steps", [(4, 1, 30), (4, 3, 30), (1, 2, 40), (4, 3, 7), (2, 1, 200)])
def test_every_sampleable_row_rebuilds_what_the_env_gave(stack, envs, steps):
    buf = UniformReplay(48, (H, W, stack * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=stack)
    obs_at, next_at = fill(buf, Stream(envs, stack, seed=stack + envs), steps)
    rows = np.array(sampleable(buf))
    assert buf._full == (steps * envs >= 48)
    np.testing.assert_array_equal(buf.frames.obs(rows, envs), np.stack([obs_at[r] for r in rows]))
    np.testing.assert_array_equal(buf.frames.next_obs(rows, envs), np.stack([next_at[r] for r in rows]))
    batch = buf.sample(64)
    assert batch.obs.dtype == np.uint8 and batch.obs.shape == (64, H, W, stack * C)
    assert set(np.flatnonzero([any((batch.obs[i] == obs_at[r]).all() for r in rows) for i in range(64)])) == set(range(64))


def test_a_full_ring_samples_only_the_rows_it_can_rebuild():
    buf = UniformReplay(20, (H, W, 4 * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=4)
    obs_at, _ = fill(buf, Stream(2, 4, seed=1), 25)
    assert buf.unsampled() == 8  # stack 4 x 2 envs
    rows = sampleable(buf)
    assert len(rows) == 12
    seen = set()
    for _ in range(30):
        for o in buf.sample(16).obs:
            match = [r for r in rows if (o == obs_at[r]).all()]
            assert match, "a sample whose observation no sampleable row holds"
            seen.add(match[0])
    assert seen == set(rows)


def test_prioritized_frames_give_the_unsampled_rows_no_priority():
    buf = PrioritizedReplay(20, (H, W, 4 * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=4)
    obs_at, _ = fill(buf, Stream(1, 4, seed=2), 33)
    window = [(buf._cursor + i) % 20 for i in range(4)]
    assert np.all(buf._tree.get(np.array(window)) == 0)
    batch = buf.sample(64)
    assert not set(buf.last_indices.tolist()) & set(window)
    buf.update_priorities(np.full(64, 5.0))
    assert np.all(buf._tree.get(np.array(window)) == 0)
    for i, r in enumerate(buf.last_indices):
        np.testing.assert_array_equal(batch.obs[i], obs_at[r])


def test_n_step_bootstraps_from_the_stored_frames_of_the_last_row():
    stack, envs = 4, 2
    buf = UniformReplay(64, (H, W, stack * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8,
                        frame_stack=stack, n_step=3)
    _, next_at = fill(buf, Stream(envs, stack, seed=5), 20)
    rows = np.arange(len(buf))
    reward, next_obs, discount = buf._n_step_return(rows)
    terminated, truncated = buf.field("terminated"), buf.field("truncated")
    for r in rows:  # walk the env's stream by hand: up to 3 rows, stopping at an episode's end or the newest
        last = r
        for k in range(3):
            row = r + k * envs
            if row >= len(buf):
                break
            last = row
            if terminated[row] or truncated[row]:
                break
        np.testing.assert_array_equal(next_obs[r], next_at[last])


def test_state_dict_round_trip_resumes_the_same_samples_and_adds():
    stream = Stream(3, 4, seed=7)
    make = lambda: UniformReplay(30, (H, W, 4 * C), 1, 0.9, np.random.default_rng(3), obs_dtype=np.uint8,  # noqa: E731
                                 frame_stack=4)
    buf = make()
    fill(buf, stream, 14)
    copy = make()
    copy.load_state_dict({k: np.array(v) for k, v in buf.state_dict().items()})
    copy._rng.bit_generator.state = buf._rng.bit_generator.state
    for _ in range(5):  # the same adds into both: the episodes running at the save go on in the copy
        step = stream.step()
        for b in (buf, copy):
            b.add(step[0], np.zeros((3, 1)), np.ones(3), step[1], step[2], step[3])
    for a, b in zip(buf.sample(40), copy.sample(40)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(buf.field("obs"), copy.field("obs"))


def test_frames_are_stored_once():
    """Memory: a stored row is one frame (plus a few integers), not 2 x stack of them."""
    buf = UniformReplay(1000, (84, 84, 4), 1, 0.99, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=4)
    assert buf.frames.frames.nbytes == 1000 * 84 * 84
    assert buf._data.nbytes + buf.frames.step.nbytes + buf.frames.slot.nbytes < 0.01 * buf.frames.frames.nbytes


def test_each_episode_in_the_ring_keeps_one_first_observation_and_gives_it_back():
    """One env, episodes of 3 steps, 300 steps into a ring of 20: the rows of steps 280-299 hold
    the starts of the episodes of steps 282, 285, ..., 297, so 6 first observations are kept, and
    the slots of the 94 episodes overwritten before them were given back and reused."""
    buf = UniformReplay(20, (H, W, 4 * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=4)
    frame = lambda t: np.full((H, W, C), t % 251 + 1, np.uint8)  # noqa: E731
    for t in range(300):
        first = t - t % 3
        history = [frame(first)] * 3 + [frame(i) for i in range(first, t + 2)]
        obs, next_obs = np.concatenate(history[-5:-1], -1), np.concatenate(history[-4:], -1)
        buf.add(obs[None], [[0.0]], [1.0], next_obs[None], [t % 3 == 2], [False])
    kept = buf.frames.first_row[buf.frames.first_row >= 0]
    np.testing.assert_array_equal(np.sort(kept), np.arange(282, 300, 3) % 20)
    assert len(buf.frames.first_row) <= 16  # grown to 8, then by half at most once


@pytest.mark.parametrize("shape,stack,problem", [((3, 2, 6), 4, "not 4 stacked frames"), ((8,), 0, "frame_stack")])
def test_bad_frame_settings_are_named(shape, stack, problem):
    with pytest.raises(ValueError, match=problem):
        UniformReplay(30, shape, 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=stack)


@pytest.mark.parametrize("capacity,envs", [(12, 3), (4, 1)])
def test_a_ring_too_small_for_the_stacks_of_its_envs_is_refused(capacity, envs):
    """Once full, a ring's stack * envs oldest rows cannot be rebuilt: with no row left, the
    uniform draw would fail and the prioritized one return a broken stack."""
    buf = UniformReplay(capacity, (H, W, 4 * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8,
                        frame_stack=4) if envs > 1 else None
    with pytest.raises(ValueError, match=f"capacity={capacity} is too small.*stacks of 4 frames from num_envs={envs}, .*above {4 * envs}"):
        if buf is None:
            UniformReplay(capacity, (H, W, 4 * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=4)
        fill(buf, Stream(envs, 4, seed=0), 1)
    cfg = OmegaConf.create({"buffer": {"_target_": "buffers.uniform.UniformReplay", "capacity": capacity, "gamma": 0.9},
                            "num_envs": envs, "env": {"frame_stack": 4}})
    with pytest.raises(ConfigError, match=f"cannot build buffers.uniform.UniformReplay: buffer.capacity={capacity}"):
        build_buffer(cfg, gym.spaces.Box(0, 255, (H, W, 4 * C), np.uint8), gym.spaces.Discrete(2),
                     np.random.default_rng(0))


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_restored_ring_reads_what_the_saved_one_reads_where_a_first_observation_was_freed(prioritized):
    """One episode longer than the ring, ending at its newest row: its first observation's slot was
    given back when the row of its start was overwritten, yet the rows just after the cursor still
    point at that slot, and a run from the newest row reads on into them. A restored ring must read
    them as the saved one does (before, it kept only the slots in use and could not read them)."""
    kind = PrioritizedReplay if prioritized else UniformReplay
    make = lambda: kind(20, (H, W, 4 * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8,  # noqa: E731
                        frame_stack=4)
    buf, frame = make(), (lambda t: np.full((H, W, C), t + 1, np.uint8))
    history = [frame(0)] * 4
    for t in range(21):
        obs = np.concatenate(history[-4:], -1)
        history.append(frame(t + 1))
        buf.add(obs[None], [[0.0]], [1.0], np.concatenate(history[-4:], -1)[None], [t == 20], [False])
    assert not (buf.frames.first_row >= 0).any()  # the episode's start is overwritten: no slot in use
    saved = {k: np.array(v) for k, v in buf.state_dict().items()}
    restored = make()
    restored.load_state_dict(saved)
    newest = np.array([(buf._cursor - 1) % 20])
    for field in ("obs", "next_obs"):
        np.testing.assert_array_equal(getattr(restored._sequences(newest, 3), field),
                                      getattr(buf._sequences(newest, 3), field))
    # a checkpoint of the earlier layout (only the slots in use, here none, the rows remapped to 0) loads,
    # and its band rows read a free slot rather than fail
    used = np.flatnonzero(saved["first_row"] >= 0)
    remap = np.zeros(len(saved["first_row"]), np.int64)
    remap[used] = np.arange(len(used))
    old = {**saved, "frame_slot": remap[saved["frame_slot"]], "env_slot": remap[saved["env_slot"]],
           "firsts": saved["firsts"][used], "first_row": saved["first_row"][used]}
    from_old = make()
    from_old.load_state_dict(old)
    assert from_old._sequences(newest, 3).next_obs.shape == buf._sequences(newest, 3).next_obs.shape


def test_sequences_rebuild_each_step_of_the_run_from_the_frames():
    envs, stack = 3, 4
    buf = UniformReplay(48, (H, W, stack * C), 1, 0.9, np.random.default_rng(0), obs_dtype=np.uint8, frame_stack=stack)
    obs_at, next_at = fill(buf, Stream(envs, stack, seed=5), 30)  # the ring is full: rows overwritten
    seq = buf.sample_sequences(32, 3)
    whole = [r for r in sampleable(buf) if buf.whole_runs(np.array([r]), 3)[0]]
    for i in range(32):
        start = [r for r in whole if (obs_at[r] == seq.obs[i]).all()]
        assert len(start) == 1, "a start that is not a whole run's, or not what the env gave"
        for k in range(3):
            row = (start[0] + k * envs) % buf.capacity
            np.testing.assert_array_equal(seq.next_obs[i, k], next_at[row])
            if seq.terminated[i, k]:
                break


def test_replay_of_stacked_minatar_frames_gives_back_the_envs_observations():
    """MinAtar Breakout with env.frame_stack=2 into a replay that keeps one frame per step: every
    stored obs and next_obs, rebuilt from the frames, is what the env returned, across episode
    ends (the replay takes the env's stacks to be the newest frame last)."""
    from buffers.uniform import UniformReplay

    env = make_env("MinAtar-v1", seed=0, kwargs={"game": "breakout"}, frame_stack=2)
    buffer = UniformReplay(100, env.observation_space.shape, 1, 0.99, np.random.default_rng(0), discrete_actions=True,
                           obs_dtype=np.uint8, frame_stack=2)
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=0)
    seen, ends = [], 0
    for _ in range(40):
        action = int(rng.integers(env.action_space.n))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buffer.add(obs[None], [action], [reward], next_obs[None], [terminated], [truncated])
        seen.append((obs, next_obs))
        obs = next_obs
        if terminated or truncated:
            ends += 1
            obs, _ = env.reset()
    assert ends >= 2, "the test crosses too few episode ends"
    np.testing.assert_array_equal(buffer.field("obs"), np.stack([o for o, _ in seen]))
    np.testing.assert_array_equal(buffer.field("next_obs"), np.stack([n for _, n in seen]))


PIXEL_RUNS = {
    # MinAtar: prioritized 3-step replay (beta annealed over the whole 400 steps in both runs, not over the
    # first 200 of the one then extended); Atari: a ring of 150 frames that wraps (stacks of 4, Pong)
    "minatar": ["env=minatar", "env.game=breakout", "network.convs=[[4,3,1]]", "network.hidden=[16]",
                "buffer=prioritized", "buffer.n_step=3", "buffer.beta_steps=400", "learning_starts=100", "batch_size=16"],
    "atari": ["env=atari", "env.game=Pong", "network.convs=[[4,8,4]]", "network.hidden=[16]", "buffer.capacity=150",
              "learning_starts=100", "batch_size=16", "env.max_frames_per_episode=800"],
}


def pixel_train(run_dir, kind, *overrides):
    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "agent=dqn", *PIXEL_RUNS[kind], "eval_every=200",
           "eval_episodes=1", "deterministic=true", "logger.progress=false", "checkpoint.every=0",
           "agent.eps_decay_steps=300", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("kind", sorted(PIXEL_RUNS))
def test_dqn_on_pixels_resumes_bit_exact_and_evaluates_with_video(kind, tmp_path):
    """A run extended from its checkpoint at 200 steps ends where the uninterrupted 400-step run
    does (weights, optimizer moments, the frames and priorities of replay, the game mid-episode);
    then evaluate.py plays it with a video and exports it (uint8 images in)."""
    (whole, extended), a = extended_run_ends_as_the_whole(lambda d, *o: pixel_train(d, kind, *o), tmp_path, 400)
    assert any(np.ndim(v) == 4 for v in a.values())  # conv kernels among them
    whole_evals, extended_evals = ((d / "eval.csv").read_text().splitlines() for d in (whole, extended))
    assert [r.split(",")[:3] for r in whole_evals] == [r.split(",")[:3] for r in extended_evals]
    if kind == "atari":  # games cut at 200 steps: the one under way at the checkpoint scores its whole
        games = [[(r["step"], r["game_score"], r["game_length"]) for r in csv.DictReader(open(d / "train.csv"))
                  if r.get("game_score")] for d in (whole, extended)]
        assert games[0] == games[1] and len(games[0]) == 2, games

    proc = evaluate(f"run_dir={whole}", "episodes=1", "video=true", "video_episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((whole / "eval" / "latest.json").read_text())
    assert result["videos"] and all(os.path.getsize(p) > 0 for p in result["videos"])
    import tensorflow as tf

    exported = tf.saved_model.load(str(whole / "export" / "latest"))
    shape = (10, 10, 4) if kind == "minatar" else (84, 84, 4)
    obs = np.random.default_rng(0).integers(0, 256, (3, *shape)).astype(np.uint8)
    assert exported(obs).numpy().shape == (3,)
