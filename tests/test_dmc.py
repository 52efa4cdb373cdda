"""The DeepMind Control suite (envs/dmc.py): dm_control's tasks behind the gymnasium interface, in
a process of their own; their action repeat and episode protocol, their exact state mid-episode,
and SAC trained on one through train.py (resumed bit-exact, evaluated with video, exported)."""
import ctypes.util
import functools
import json
import operator
import os
import subprocess
import sys

import dm_env
import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401 (registers DMC-v1)
from envs.factory import make_vector_env
from envs.state import env_state, set_env_state
from envs.video import VideoError, record_videos
from helpers import ROOT, evaluate, extended_run_ends_as_the_whole, train_in_process
from training import plaindata


def test_an_action_repeated_earns_the_rewards_of_its_steps_and_episodes_are_the_suites_1000():
    """With action_repeat=3 each step's reward is the sum of the three control steps' rewards that
    repeat 1 gives for the same actions from the same seed, and its observation is the third's;
    the suite's time limit of 1000 control steps (3 * 333 + 1) ends the episode as a truncation at
    step 334, after its one control step and with that step's reward alone."""
    once, thrice = gym.make("DMC-v1", domain="cartpole", task="swingup"), gym.make(
        "DMC-v1", domain="cartpole", task="swingup", action_repeat=3)
    try:
        a, _ = once.reset(seed=3)
        b, _ = thrice.reset(seed=3)
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.float32 and a.shape == once.observation_space.shape == (5,)  # position 3 + velocity 2
        rng = np.random.default_rng(0)
        for step in range(1, 335):
            action = rng.uniform(-1, 1, (1,)).astype(np.float32)
            rewards = []
            for _ in range(3 if step < 334 else 1):
                obs1, r1, term1, trunc1, _ = once.step(action)
                rewards.append(r1)
            obs3, r, term3, trunc3, _ = thrice.step(action)
            # added in order, as the env adds them (Python 3.12's sum() compensates its rounding)
            assert r == functools.reduce(operator.add, rewards, 0.0) and 0.0 <= r <= 3.0
            np.testing.assert_array_equal(obs1, obs3)
            assert (term3, trunc3) == (term1, trunc1) == (False, step == 334), step
    finally:
        once.close()
        thrice.close()


def test_pixels_are_84x84_rgb_renders_and_the_quadruped_is_seen_from_its_camera():
    env = gym.make("DMC-v1", domain="quadruped", task="walk", pixels=True)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (84, 84, 3) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
        assert obs.std() > 10  # a scene, not a blank frame
        assert env.unwrapped.action_repeat == 2  # the pixel literature's default
    finally:
        env.close()


def through_files(tree, tmp_path):
    plaindata.write(tree, str(tmp_path / "state.json"), str(tmp_path / "state.npz"))
    return plaindata.read(str(tmp_path / "state.json"), str(tmp_path / "state.npz"))


@pytest.mark.parametrize("kwargs,frame_stack", [
    ({"domain": "reacher", "task": "hard"}, 1),  # the target is placed in the model at each reset
    # contacts with the floor, renders; 125-step episodes (a render costs tens of ms here)
    ({"domain": "walker", "task": "walk", "pixels": True, "action_repeat": 8}, 3),
])
def test_dmc_envs_restored_mid_episode_continue_exactly(kwargs, frame_stack, tmp_path):
    """Saved as plain data mid-episode (the simulator, the model arrays the task moved, the task's
    random state), restored into envs built from the same arguments and reset elsewhere: the same
    observations, rewards and ends, across an episode end and the reset after it."""
    make = lambda: make_vector_env("DMC-v1", 2, seed=5, kwargs=kwargs, frame_stack=frame_stack)  # noqa: E731
    envs_, restored = make(), make()
    try:
        envs_.reset(seed=5)
        restored.reset(seed=77)
        rng = np.random.default_rng(0)
        for _ in range(30):
            envs_.step(rng.uniform(-1, 1, envs_.action_space.shape))
        set_env_state(restored, through_files(env_state(envs_), tmp_path))
        ended = False
        for _ in range(1000 // envs_.unwrapped.envs[0].unwrapped.action_repeat - 20):
            action = rng.uniform(-1, 1, envs_.action_space.shape)
            a, b = envs_.step(action), restored.step(action)
            for x, y in zip(a[:4], b[:4]):
                np.testing.assert_array_equal(x, y)
            ended |= bool(a[3].any())
        assert ended, "no episode ended: the test crosses no episode end"
    finally:
        envs_.close()
        restored.close()


def test_a_restored_quadruped_escape_renders_its_own_terrain():
    """The escape task draws new terrain (a height field in the model) at each reset; restored into
    an env that drew other terrain, the renders are the saved env's from the first step on."""
    a, b = (gym.make("DMC-v1", domain="quadruped", task="escape", pixels=True) for _ in range(2))
    try:
        a.reset(seed=1)
        b.reset(seed=2)
        b.unwrapped.restore_state(a.unwrapped.saved_state())
        action = np.zeros(a.action_space.shape, np.float32)
        np.testing.assert_array_equal(a.step(action)[0], b.step(action)[0])
        b.close()
        with pytest.raises(RuntimeError, match="this DMC env \\(quadruped-escape\\) is closed"):
            b.step(action)
    finally:
        a.close()
        b.close()


def test_a_renumbered_mujoco_enum_is_refused_rather_than_read_wrong():
    """dm_control's index of arrays is fitted to this MuJoCo only while their enums agree: one enum
    value changed (as a MuJoCo release that renumbers would) stops the env with the fix named."""
    code = ("from dm_control.mujoco.wrapper.mjbindings import enums\n"
            "enums.mjtObj = enums.mjtObj._replace(mjOBJ_BODY=enums.mjtObj.mjOBJ_BODY + 1)\n"
            "from envs.dmc import suite\nsuite()\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MUJOCO_GL": "disabled"})
    assert proc.returncode != 0
    assert "enums differ from the installed MuJoCo" in proc.stderr and "mjtObj.mjOBJ_BODY" in proc.stderr
    ok = subprocess.run([sys.executable, "-c", "from envs.dmc import suite\nsuite().load('cheetah', 'run')"],
                        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "MUJOCO_GL": "disabled"})
    assert ok.returncode == 0, ok.stderr[-2000:]


DMC_RUNS = {
    "states": ["agent=sac", "network.hidden=[32,32]"],
    # TD3 from 16x16 renders, 3 stacked, with a CNN critic and actor and DrQ's random shift
    "pixels": ["agent=td3", "env.pixels=true", "env.frame_stack=3", "env.kwargs.image_size=16", "network=nature_cnn",
               "network.convs=[[4,3,2],[4,3,1]]", "network.hidden=[16]", "network.random_shift=2"],
}


def dmc_train(run_dir, kind, *overrides):
    # episodes cut to 60 steps (a time limit over the suite's) and evaluations to 20 (a render costs
    # ~25 ms with the software renderer, most of it the shadows), renders for video at 64x64: cheap evaluations
    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "env=dmc", "env.domain=cartpole",
           "env.task=balance", "env.max_episode_steps=60", "env.eval_max_episode_steps=20", "+env.kwargs.render_size=64",
           *DMC_RUNS[kind], "learning_starts=50", "batch_size=16", "eval_every=150",
           "eval_episodes=1", "deterministic=true", "logger.progress=false", "checkpoint.every=0", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("kind", sorted(DMC_RUNS))
def test_continuous_agents_on_dmc_resume_bit_exact_and_evaluate_with_video(kind, tmp_path):
    """A run extended from its checkpoint at 100 steps (mid-episode: they are 60 steps; 50 updates
    in) ends where the uninterrupted 200-step run does (from pixels: the frames in replay, the
    shift's generator); then evaluate.py plays it with a video and exports it."""
    (whole, extended), _ = extended_run_ends_as_the_whole(lambda d, *o: dmc_train(d, kind, *o), tmp_path, 200)
    assert json.loads((whole / "summary.json").read_text())["env"] == "dmc-cartpole-balance"  # env.label
    whole_evals, extended_evals = ({r.split(",")[0]: r.split(",")[1] for r in (d / "eval.csv").read_text().splitlines()[1:]}
                                   for d in (whole, extended))
    assert list(whole_evals) == ["0", "150", "200"]  # the extended run evaluated at its end (100) too
    assert all(extended_evals[step] == ret for step, ret in whole_evals.items())

    proc = evaluate(f"run_dir={whole}", "episodes=1", "video=true", "video_episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((whole / "eval" / "latest.json").read_text())
    assert result["videos"] and all(os.path.getsize(p) > 0 for p in result["videos"])
    import tensorflow as tf

    exported = tf.saved_model.load(str(whole / "export" / "latest"))
    obs = (np.zeros((2, 16, 16, 9), np.uint8) if kind == "pixels" else np.zeros((2, 5), np.float32))
    action = exported(obs).numpy()
    assert action.shape == (2, 1) and np.all(np.abs(action) <= 1)


class ScriptedSuiteEnv:
    """A stub of a dm_control task's env: its steps give the scripted TimeSteps in turn (the
    observation dict of each holding its index), and it counts them."""

    def __init__(self, steps):
        self.steps, self.taken = steps, 0

    def step(self, action):
        step_type, reward, discount = self.steps[self.taken]
        self.taken += 1
        observation = {"position": np.array([self.taken, 0.5]), "velocity": np.array([-1.0])}
        return dm_env.TimeStep(step_type, reward, discount, observation)


def scripted_task(steps, action_repeat):
    from envs.dmc import _Task

    task = object.__new__(_Task)  # the stepping without loading a suite task
    task.env, task.pixels, task.action_repeat = ScriptedSuiteEnv(steps), False, action_repeat
    return task


MID, LAST = dm_env.StepType.MID, dm_env.StepType.LAST


@pytest.mark.parametrize("discount,ends", [(0.0, (True, False)), (1.0, (False, True))])
def test_the_suites_last_step_is_a_termination_at_discount_0_and_a_truncation_otherwise(discount, ends):
    """dm_env's protocol: a LAST step with discount 0 is the task ending itself (terminated); with
    discount > 0 the time limit (truncated). A MID step ends nothing."""
    task = scripted_task([(MID, 0.5, 1.0), (LAST, 1.0, discount)], action_repeat=1)
    obs, reward, terminated, truncated = task.step(np.zeros(1))
    assert (reward, terminated, truncated) == (0.5, False, False)
    np.testing.assert_array_equal(obs, np.array([1, 0.5, -1], np.float32))
    assert obs.dtype == np.float32
    obs, reward, terminated, truncated = task.step(np.zeros(1))
    assert (reward, terminated, truncated) == (1.0, *ends)
    np.testing.assert_array_equal(obs, np.array([2, 0.5, -1], np.float32))


@pytest.mark.parametrize("discount,ends", [(0.0, (True, False)), (1.0, (False, True))])
def test_a_repeated_action_stops_at_the_episodes_end_with_the_rewards_before_it(discount, ends):
    """action_repeat=3 with the episode's end on the second control step: the agent step earns the
    first two rewards (0.5 + 0.25), gives the last step's observation and ends, and the third
    control step (reward 100, in a next episode) is never taken."""
    task = scripted_task([(MID, 0.5, 1.0), (LAST, 0.25, discount), (MID, 100.0, 1.0)], action_repeat=3)
    obs, reward, terminated, truncated = task.step(np.zeros(1))
    assert (reward, terminated, truncated) == (0.75, *ends)
    assert task.env.taken == 2
    np.testing.assert_array_equal(obs, np.array([2, 0.5, -1], np.float32))


def test_a_dmc_reset_with_a_seed_draws_the_tasks_initial_state_from_that_seed():
    """Cartpole swingup's initial state is drawn from the task's RandomState (dm_control's
    cartpole.py: cart 0.01 randn, pole pi + 0.01 randn, velocities 0.01 randn each): reset(seed=s)
    gives the observation (cart, cos, sin of the pole, velocities) of RandomState(s)'s draws, the
    same seed again the same one, whatever reset came between."""
    env = gym.make("DMC-v1", domain="cartpole", task="swingup")
    try:
        def expected(seed):
            draws = np.random.RandomState(seed)
            cart, pole = 0.01 * draws.randn(), np.pi + 0.01 * draws.randn()
            return np.array([cart, np.cos(pole), np.sin(pole), *(0.01 * draws.randn(2))], np.float32)

        first, _ = env.reset(seed=1)
        np.testing.assert_allclose(first, expected(1), rtol=1e-5, atol=1e-7)
        other, _ = env.reset(seed=2)
        np.testing.assert_allclose(other, expected(2), rtol=1e-5, atol=1e-7)
        again, _ = env.reset(seed=1)
        np.testing.assert_array_equal(again, first)
    finally:
        env.close()



@pytest.mark.skipif(ctypes.util.find_library("OSMesa") is not None, reason="OSMesa is installed, so MUJOCO_GL=osmesa loads")
def test_a_missing_rendering_backend_names_what_to_install_and_states_need_none(tmp_path, capsys, monkeypatch):
    """MUJOCO_GL=osmesa where OSMesa is not installed, as a user on a headless machine might set it:
    DMC from pixels is refused with the packages to install (exit 2, no traceback, no run directory),
    and so is a video of a MuJoCo task; DMC from states renders nothing, loads no backend, and runs."""
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    proc = train_in_process(capsys, f"hydra.run.dir={tmp_path / 'run'}", "logger.progress=false", "agent=sac", "env=dmc",
                            "env.pixels=true", "network=nature_cnn")
    assert proc.returncode == 2
    assert "MuJoCo's OpenGL backend (MUJOCO_GL=osmesa) could not be loaded" in proc.stderr
    assert "apt-get install libosmesa6" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists()
    with pytest.raises(VideoError, match="could not record a video of InvertedPendulum-v5: MuJoCo's OpenGL backend"):
        record_videos(lambda obs: np.zeros(1, np.float32), "InvertedPendulum-v5", seed=0, episodes=1,
                      prefix=str(tmp_path / "video"))
    env = gym.make("DMC-v1", domain="cartpole", task="swingup")
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (5,)
        env.step(np.zeros(1, np.float32))
    finally:
        env.close()
