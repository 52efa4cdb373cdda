"""The training envs in a checkpoint: restored mid-episode, they go on exactly as if never saved,
from plain data that loads without pickle."""
import os

import numpy as np
import pytest
from helpers import ROOT

from envs.factory import make_vector_env
from envs.minatar import GAMES
from envs.state import EnvStateError, env_state, set_env_state
from training import plaindata


def rollout(envs, actions):
    out = []
    for a in actions:
        obs, reward, terminated, truncated, _ = envs.step(a)
        out.append((obs.copy(), reward.copy(), terminated.copy(), truncated.copy()))
    return out


def through_files(tree, tmp_path):
    plaindata.write(tree, str(tmp_path / "state.json"), str(tmp_path / "state.npz"))
    return plaindata.read(str(tmp_path / "state.json"), str(tmp_path / "state.npz"))


SUITES = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "conf", "env")) if f.endswith(".yaml"))


def suite_envs(make_cfg, name):
    """Two training envs of conf/env/<name>.yaml, made as build_run makes them."""
    from training.config import frame_stack

    cfg = make_cfg(f"env={name}")
    return make_vector_env(cfg.env.id, 2, seed=3, max_episode_steps=cfg.env.max_episode_steps,
                           kwargs=cfg.env.kwargs, frame_stack=frame_stack(cfg))


@pytest.mark.parametrize("name", SUITES)
def test_every_suite_makes_seeded_envs_whose_state_restores_exactly(make_cfg, name, tmp_path):
    """Every conf/env yaml (a new suite's too): its envs are made as a run makes them, a seeded
    reset is the same every time and in the observation space, and restored mid-episode into
    envs rebuilt from the same arguments, never reset, they go on exactly: 150 steps cross
    episode ends (terminations, CartPole's and the Gridworld's within a few dozen steps), then an
    unseeded reset and a draw of the action space, each from its own restored generator."""
    envs = suite_envs(make_cfg, name)
    first = envs.reset(seed=3)[0]
    assert envs.observation_space.contains(first)
    np.testing.assert_array_equal(suite_envs(make_cfg, name).reset(seed=3)[0], first)
    rng = np.random.default_rng(0)
    rollout(envs, [envs.action_space.sample() for _ in range(7)])  # mid-episode
    saved = through_files(env_state(envs), tmp_path)
    space = envs.action_space
    actions = [rng.integers(0, space.nvec) if hasattr(space, "nvec") else
               rng.uniform(space.low, space.high).astype(np.float32) for _ in range(150)]
    after = rollout(envs, actions)
    first_reset = envs.reset()[0]  # unseeded: from each env's own RNG
    drawn = envs.action_space.sample()
    restored = suite_envs(make_cfg, name)
    set_env_state(restored, saved)
    again = rollout(restored, actions)
    for (o1, r1, te1, tr1), (o2, r2, te2, tr2) in zip(after, again):
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(te1, te2)
        np.testing.assert_array_equal(tr1, tr2)
    np.testing.assert_array_equal(first_reset, restored.reset()[0])
    np.testing.assert_array_equal(drawn, restored.action_space.sample())
    envs.close()
    restored.close()


def test_mujoco_derived_quantities_come_back_too():
    """Ant's reward reads the torso's position as the last step left it (a derived quantity, one
    physics step behind qpos): restoring qpos/qvel alone and recomputing would change it."""
    envs = make_vector_env("Ant-v5", 1, seed=0)
    envs.reset(seed=0)
    rollout(envs, [envs.action_space.sample() for _ in range(5)])
    saved = env_state(envs)
    restored = make_vector_env("Ant-v5", 1, seed=0)
    set_env_state(restored, saved)
    data, again = envs.unwrapped.envs[0].unwrapped.data, restored.unwrapped.envs[0].unwrapped.data
    for name in ("qpos", "qvel", "qacc_warmstart", "xpos", "cfrc_ext", "act", "ctrl"):
        np.testing.assert_array_equal(getattr(data, name), getattr(again, name), err_msg=name)
    assert data.time == again.time


def test_state_of_another_env_is_refused():
    envs = make_vector_env("Pendulum-v1", 1, seed=0)
    envs.reset(seed=0)
    saved = env_state(envs)
    with pytest.raises(EnvStateError, match="PendulumEnv when saved, but this run built a CartPoleEnv"):
        set_env_state(make_vector_env("CartPole-v1", 1, seed=0), saved)
    with pytest.raises(EnvStateError, match="holds 1 env"):
        set_env_state(make_vector_env("Pendulum-v1", 2, seed=0), saved)


def test_async_envs_are_not_saved():
    envs = make_vector_env("Pendulum-v1", 2, seed=0, vectorization="async")
    try:
        assert env_state(envs) is None
    finally:
        envs.close()


def test_plain_data_round_trips_with_its_types(tmp_path):
    from collections import deque

    tree = {"i": 3, "big": 2**100, "f": -np.inf, "s": "x", "n": None, "b": True, "t": (1, (2.5, "a")),
            "l": [1, [np.float32(0.1)]], "d": deque([1.0, 2.0], maxlen=5), "k": {1: "int key", "__plain__": 2},
            "a": np.arange(6, dtype=np.int16).reshape(2, 3), "u": np.uint8(7), "e": np.zeros((0, 3))}
    back = through_files(tree, tmp_path)
    assert back.keys() == tree.keys()
    assert back["t"] == (1, (2.5, "a")) and back["big"] == 2**100 and back["f"] == -np.inf
    assert type(back["l"][1][0]) is np.float32 and back["l"][1][0] == np.float32(0.1)
    assert isinstance(back["d"], deque) and back["d"].maxlen == 5 and list(back["d"]) == [1.0, 2.0]
    assert back["k"] == {1: "int key", "__plain__": 2}
    assert back["a"].dtype == np.int16 and back["a"].tolist() == tree["a"].tolist() and back["a"].flags.writeable
    assert type(back["u"]) is np.uint8 and back["e"].shape == (0, 3)


def test_plain_data_refuses_objects_by_their_place(tmp_path):
    with pytest.raises(plaindata.PlainDataError, match=r"state.loop.x\[1\] is a builtins.object"):
        plaindata.encode({"loop": {"x": [1, object()]}})
    with pytest.raises(plaindata.PlainDataError, match="array of Python objects"):
        plaindata.encode({"a": np.array([None, 1], dtype=object)})
    (tmp_path / "s.json").write_text('{"x": {"__plain__": "exec", "code": "1"}}')
    np.savez(tmp_path / "s.npz")
    with pytest.raises(plaindata.PlainDataError, match="unknown kind 'exec'"):
        plaindata.read(str(tmp_path / "s.json"), str(tmp_path / "s.npz"))


def test_vector_episode_statistics_count_every_episode_in_full():
    """With same-step autoreset every episode after the first starts on a real step; gymnasium
    before 1.4 dropped that step from the episode statistics (Pendulum's episodes read 199 steps)."""
    envs = make_vector_env("Pendulum-v1", 2, seed=0)
    envs.reset(seed=0)
    lengths, returns = [], []
    for _ in range(600):
        _, reward, _, _, infos = envs.step(envs.action_space.sample())
        if "episode" in infos:
            lengths += [int(x) for x in infos["episode"]["l"][infos["_episode"]]]
            returns += [float(x) for x in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    assert lengths == [200] * 6
    assert all(r < 0 for r in returns)


@pytest.mark.parametrize("env_id,kwargs,frame_stack", [
    *(("MinAtar-v1", {"game": g}, 1) for g in GAMES),
    ("MinAtar-v1", {"game": "breakout"}, 2),
    ("Atari-v5", {"game": "Breakout", "sticky_action_prob": 0.25}, 4),
    ("Atari-v5", {"game": "Pong", "sticky_action_prob": 0.25}, 4),
])
def test_pixel_envs_restored_mid_episode_continue_exactly(env_id, kwargs, frame_stack, tmp_path):
    """Saved as plain data mid-episode (the game's variables, the emulator's state and RNG: sticky
    actions on), restored into envs built from the same arguments: the same frames, rewards and
    ends, across episode ends, and the same next unseeded reset."""
    make = lambda: make_vector_env(env_id, 2, seed=5, kwargs=kwargs, frame_stack=frame_stack)  # noqa: E731
    envs_ = make()
    envs_.reset(seed=5)
    rng = np.random.default_rng(0)
    rollout(envs_, [rng.integers(0, envs_.single_action_space.n, 2) for _ in range(9)])
    saved = through_files(env_state(envs_), tmp_path)
    actions = [rng.integers(0, envs_.single_action_space.n, 2) for _ in range(120)]
    after, first_reset = rollout(envs_, actions), envs_.reset()[0]
    restored = make()
    set_env_state(restored, saved)
    again = rollout(restored, actions)
    if kwargs["game"].lower() == "breakout":  # its episodes (and Atari's lives) end within these steps
        assert any(step[2].any() for step in after), "no episode ended: the test crosses no episode end"
    for a, b in zip(after, again):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(first_reset, restored.reset()[0])
    assert after[-1][0].dtype == np.uint8
    envs_.close()
    restored.close()
