"""Pixels: the CNNs, MinAtar and Atari envs (their processing and exact state), and DQN trained on
them through train.py: resumed bit-exact with frames stored once, evaluated with video, exported."""
import json
import os
import subprocess
import sys

import gymnasium as gym
import keras
import numpy as np
import pytest

import envs  # noqa: F401 (registers MinAtar-v1 and Atari-v5)
from buffers.types import Batch
from envs.factory import make_env, make_vector_env
from envs.minatar import GAMES
from envs.state import env_state, set_env_state
from helpers import ROOT, evaluate, extended_run_ends_as_the_whole
from networks.cnn import conv_net, impala_cnn
from training import plaindata


def params(model) -> int:
    return int(sum(np.prod(w.shape) for w in model.weights))


def test_the_nature_network_has_the_papers_layers():
    """84x84x4 -> 20x20x32 -> 9x9x64 -> 7x7x64 = 3136 -> 512 -> 4 actions: by hand, 8*8*4*32+32 +
    4*4*32*64+64 + 3*3*64*64+64 + 3136*512+512 + 512*4+4 = 1,686,180 weights."""
    net = conv_net((84, 84, 4), 4)
    assert [tuple(l.output.shape[1:]) for l in net.layers if "conv" in l.name] == [(20, 20, 32), (9, 9, 64), (7, 7, 64)]
    assert params(net) == 1_686_180
    assert net.inputs[0].dtype == "uint8"


def test_the_impala_network_has_the_papers_layers():
    """Per stage a conv, a stride-2 pool (84 -> 42 -> 21 -> 11) and two residual blocks of two convs:
    by hand, 592 + 4*2320 + 4640 + 4*9248 + 9248 + 4*9248 + (11*11*32)*256+256 + 256*4+4 = 1,090,260."""
    net = impala_cnn((84, 84, 4), 4)
    assert params(net) == 1_090_260
    assert sum(isinstance(l, keras.layers.Add) for l in net.layers) == 6


def test_dueling_cnn_heads_combine_value_and_advantage():
    net = conv_net((10, 10, 4), 3, convs=[[4, 3, 1]], hidden=[8], dueling=True)
    names = {l.name for l in net.layers}
    assert {"cnn_v", "cnn_a", "cnn_out"} <= names
    x = np.random.default_rng(0).integers(0, 256, (5, 10, 10, 4)).astype(np.uint8)
    q = np.asarray(net(x))
    v, a = (np.asarray(keras.Model(net.inputs[0], net.get_layer(n).output)(x)) for n in ("cnn_v", "cnn_a"))
    np.testing.assert_allclose(q, v + a - a.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_images_are_scaled_to_unit_range_and_torch_init_bounds_the_kernels():
    net = conv_net((10, 10, 4), 3, convs=[[16, 3, 1]], hidden=[8])
    kernel = np.asarray(net.get_layer("cnn_conv0").kernel)
    bound = 1 / np.sqrt(3 * 3 * 4)  # PyTorch's Conv2d default: U(+-1/sqrt(fan_in))
    assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.9 * bound
    x = np.full((1, 10, 10, 4), 255, np.uint8)
    after_scale = keras.Model(net.inputs[0], net.get_layer("cnn_scale").output)(x)
    np.testing.assert_array_equal(np.asarray(after_scale), np.ones((1, 10, 10, 4), np.float32))


def through_files(tree, tmp_path):
    plaindata.write(tree, str(tmp_path / "state.json"), str(tmp_path / "state.npz"))
    return plaindata.read(str(tmp_path / "state.json"), str(tmp_path / "state.npz"))


def rollout(envs_, actions):
    return [tuple(np.copy(x) for x in envs_.step(a)[:4]) for a in actions]


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


def test_minatar_observations_are_the_game_channels_as_bytes():
    env = make_env("MinAtar-v1", seed=0, kwargs={"game": "seaquest"})
    obs, _ = env.reset(seed=0)
    game = env.unwrapped.game.state()
    assert obs.shape == (10, 10, 10) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, game.astype(np.uint8) * 255)
    assert env.observation_space.contains(obs)


def test_atari_training_episodes_end_at_a_lost_life_and_the_game_goes_on():
    """Training: a lost life terminates the episode and the next reset continues the game (one life
    fewer); rewards are clipped. Evaluation's kwargs: whole games, the game's score."""
    train = make_env("Atari-v5", seed=0, kwargs={"game": "Breakout"}, frame_stack=4)
    obs, _ = train.reset(seed=0)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    ale = train.unwrapped.ale
    lives, terminated, steps = ale.lives(), False, 0
    while not terminated:
        obs, reward, terminated, truncated, _ = train.step(0)  # NOOP: the ball is missed
        assert reward in (0.0, 1.0)
        steps += 1
    assert ale.lives() == lives - 1 and not ale.game_over()
    train.reset()
    assert ale.lives() == lives - 1, "the reset after a lost life must continue the game"
    whole = make_env("Atari-v5", seed=0, kwargs={"game": "Breakout", "terminal_on_life_loss": False,
                                                  "clip_rewards": False}, frame_stack=4)
    whole.reset(seed=0)
    for _ in range(steps + 5):
        _, _, terminated, _, _ = whole.step(0)
        assert not terminated


def test_an_unknown_atari_game_names_the_close_ones():
    with pytest.raises(Exception, match="no game 'Breakou'. Did you mean Breakout"):
        make_env("Atari-v5", seed=0, kwargs={"game": "Breakou"})


PIXEL_RUNS = {
    # MinAtar: prioritized 3-step replay (beta annealed over the whole 400 steps in both runs, not over the
    # first 200 of the one then extended); Atari: a ring of 150 frames that wraps (stacks of 4, Pong)
    "minatar": ["env=minatar", "env.game=breakout", "network.convs=[[4,3,1]]", "network.hidden=[16]",
                "buffer=prioritized", "buffer.n_step=3", "buffer.beta_steps=400", "learning_starts=100", "batch_size=16"],
    "atari": ["env=atari", "env.game=Pong", "network.convs=[[4,8,4]]", "network.hidden=[16]", "buffer.capacity=150",
              "learning_starts=100", "batch_size=16", "env.max_episode_steps=200"],
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

    proc = evaluate(f"run_dir={whole}", "episodes=1", "video=true", "video_episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((whole / "eval" / "latest.json").read_text())
    assert result["videos"] and all(os.path.getsize(p) > 0 for p in result["videos"])
    import tensorflow as tf

    exported = tf.saved_model.load(str(whole / "export" / "latest"))
    shape = (10, 10, 4) if kind == "minatar" else (84, 84, 4)
    obs = np.random.default_rng(0).integers(0, 256, (3, *shape)).astype(np.uint8)
    assert exported(obs).numpy().shape == (3,)


@pytest.mark.parametrize("build,shape,in_numpy", [
    (lambda: conv_net((84, 84, 4), 6), (84, 84, 4), True),
    (lambda: conv_net((84, 84, 4), 6, dueling=True), (84, 84, 4), True),
    (lambda: conv_net((10, 10, 7), 6, convs=[[16, 3, 1]], hidden=[128]), (10, 10, 7), True),
    (lambda: conv_net((12, 12, 3), 4, convs=[[8, 3, 2], [8, 2, 1]], hidden=[16, 16], activation="tanh"), (12, 12, 3),
     True),
    (lambda: impala_cnn((20, 20, 4), 5, channels=[4, 8]), (20, 20, 4), False),  # max-pooling: through TF
])
def test_cnn_acting_in_numpy_gives_the_networks_outputs(build, shape, in_numpy):
    from agents.acting import Forward

    net = build()
    fast, tf_call = Forward(net, numpy=True), Forward(net, numpy=False)
    assert fast.in_numpy == in_numpy and fast.obs_dtype == "uint8"
    x = np.random.default_rng(0).integers(0, 256, (5, *shape)).astype(np.uint8)
    np.testing.assert_allclose(fast(x), tf_call(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fast(x[:1]), np.asarray(net(x[:1])), rtol=1e-5, atol=1e-5)


def test_a_dueling_mlp_acts_in_numpy_too():
    from agents.acting import Forward
    from networks.mlp import dueling_mlp

    net = dueling_mlp(6, 3, hidden=[16, 8])
    fast = Forward(net, numpy=True)
    x = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    assert fast.in_numpy
    np.testing.assert_allclose(fast(x), np.asarray(net(x)), rtol=1e-5, atol=1e-6)


def test_evaluation_epsilon_takes_random_actions_at_its_rate_from_its_own_seed():
    from training.evaluation import epsilon_greedy

    space = gym.spaces.Discrete(4)
    greedy = lambda obs: np.int64(3)  # noqa: E731
    assert epsilon_greedy(greedy, space, 0.0, seed=1) is greedy
    policy = epsilon_greedy(greedy, space, 0.25, seed=1)
    actions = np.array([policy(None) for _ in range(4000)])
    assert 0.25 * 0.75 - 0.03 < np.mean(actions != 3) < 0.25 * 0.75 + 0.03  # a random action is 3 a quarter of the time
    again = epsilon_greedy(greedy, space, 0.25, seed=1)
    np.testing.assert_array_equal(actions, [again(None) for _ in range(4000)])


def test_random_shift_crops_the_edge_padded_image_at_each_offset():
    """DrQ's shift by hand on a 4x4 image padded by 1: offset (1, 1) is the image itself, (0, 0)
    moves it down-right with its first row and column repeated, (2, 2) up-left with its last
    repeated; each image of a batch takes its own offsets."""
    import tensorflow as tf

    from agents.augment import RandomShift, random_shift

    image = np.arange(16, dtype=np.uint8).reshape(4, 4)
    batch = tf.constant(np.stack([image, image, image])[..., None])
    shifted = random_shift(batch, tf.constant([[1, 1], [0, 0], [2, 2]]), 1)[..., 0].numpy()
    np.testing.assert_array_equal(shifted[0], image)
    np.testing.assert_array_equal(shifted[1], [[0, 0, 1, 2], [0, 0, 1, 2], [4, 4, 5, 6], [8, 8, 9, 10]])
    np.testing.assert_array_equal(shifted[2], [[5, 6, 7, 7], [9, 10, 11, 11], [13, 14, 15, 15], [13, 14, 15, 15]])
    assert shifted.dtype == np.uint8
    shift = RandomShift(2, seed=0)
    offsets = shift.rng.uniform([2000, 2], 0, 5, dtype=tf.int32).numpy()
    assert set(np.unique(offsets)) == {0, 1, 2, 3, 4}  # -2..+2 pixels each way
    big = tf.constant(np.random.default_rng(0).integers(0, 256, (64, 8, 8, 3)).astype(np.uint8))
    moved = shift(big).numpy()
    assert moved.shape == big.shape and np.mean(np.all(moved == big.numpy(), axis=(1, 2, 3))) < 0.2  # 1 in 25 stays


def test_the_compiled_update_trains_on_shifted_images():
    """TD3 on images with `random_shift` (K = 1, then K = 2 fused updates) ends with the weights of
    the same TD3 without it, fed the batches shifted by hand with a generator seeded alike (obs,
    then next_obs, update by update); and with other weights than on the unshifted batches."""
    import tensorflow as tf

    from agents.augment import RandomShift
    from agents.td3 import TD3
    from helpers import compiled, stack

    def learner(shift=None):
        keras.utils.set_random_seed(0)
        net = lambda *a, **k: conv_net(*a, convs=[[4, 3, 2]], hidden=[8], **k)  # noqa: E731
        agent = TD3((9, 9, 3), np.array([-1.0]), np.array([1.0]), net, np.random.default_rng(0), policy_delay=1)
        return compiled(agent, random_shift=shift)

    rng = np.random.default_rng(0)

    def batch():
        images = lambda: rng.integers(0, 256, (8, 9, 9, 3)).astype(np.uint8)  # noqa: E731
        return Batch(images(), rng.uniform(-1, 1, (8, 1)).astype(np.float32), rng.normal(size=8).astype(np.float32),
                     images(), np.full(8, 0.99, np.float32), np.ones(8, np.float32))

    batches = [batch() for _ in range(3)]
    shifted, by_hand, plain = learner(RandomShift(2, seed=7)), learner(), learner()
    clone = RandomShift(2, seed=7)
    hand = [b._replace(obs=clone(tf.constant(b.obs)).numpy(), next_obs=clone(tf.constant(b.next_obs)).numpy())
            for b in batches]
    for learner_, feed in ((shifted, batches), (by_hand, hand), (plain, batches)):
        learner_.update(stack(feed[:1]))
        learner_.update(stack(feed[1:]))
    weights = [[w.numpy() for w in l.agent.critic1.weights + l.agent.actor.weights] for l in (shifted, by_hand, plain)]
    for a, b in zip(weights[0], weights[1]):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for a, c in zip(weights[0], weights[2]))
