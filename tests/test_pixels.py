"""Pixels: the CNNs, MinAtar and Atari envs (their processing and exact state), and DQN trained on
them through train.py: resumed bit-exact with frames stored once, evaluated with video, exported."""
import csv
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
from envs.factory import finished_games, make_env, make_vector_env
from envs.minatar import GAMES
from envs.state import env_state, set_env_state
from helpers import ROOT, evaluate, extended_run_ends_as_the_whole
from networks.cnn import conv_net, impala_cnn
from training import plaindata
from training.config import frame_stack


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


@pytest.mark.parametrize("game,problem", [("Breakou", "has no game 'Breakou'. Did you mean Breakout"),
                                          ("Combat", "'Combat' is a two-player game")])
def test_an_unknown_or_two_player_atari_game_is_named(game, problem):
    """A two-player ROM is refused before the ALE is asked: ale-py ends the process on it."""
    with pytest.raises(Exception, match=problem):
        make_env("Atari-v5", seed=0, kwargs={"game": game})


@pytest.mark.parametrize("game,fires", [("Breakout", True), ("Pong", True), ("Backgammon", False), ("Seaquest", True),
                                        ("MsPacman", False)])
def test_fire_after_a_reset_only_where_action_1_is_fire(game, fires):
    """SB3's FireResetEnv presses actions 1 and 2 where action 1 is FIRE. Backgammon's FIRE is
    action 0 (1 and 2 move), so it gets no FIRE reset, where a check for FIRE among the actions
    had pressed RIGHT and LEFT after each reset; MsPacman has no FIRE."""
    from envs.atari import FireReset, make_atari

    env = make_atari(game, noop_max=0)
    assert (FireReset in wrapper_chain(env)) is fires
    assert (env.unwrapped.get_action_meanings()[1] == "FIRE") is fires


def test_a_training_game_reports_its_whole_unclipped_score_at_its_end():
    """Space Invaders with the training settings (episodes of one life, rewards clipped to their
    sign) reports, at the step that ends the game, the game's score: every clipped reward of its
    3 episodes counts at least 5 points there, and its length covers them all."""
    env = make_env("Atari-v5", seed=0, kwargs={"game": "SpaceInvaders"}, frame_stack=4)
    env.reset(seed=0)
    episodes, clipped, length = 0, 0.0, 0
    for _ in range(5000):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        clipped, length = clipped + reward, length + 1
        if "game_score" in info:
            break
        if terminated or truncated:
            episodes += 1
            env.reset()
    assert episodes + 1 == 3 and set(info) >= {"game_score", "game_length"}
    assert clipped > 0 and info["game_score"] >= 5 * clipped and info["game_length"] >= length


def test_a_game_that_ends_in_a_resets_own_step_is_reported_too():
    """The frame limit set to land on the FIRE step that follows a lost life (12 frames after it:
    the life-loss reset's no-op, then FIRE): the game ends inside the reset that same-step autoreset
    runs, and the vector step reports it from that reset's info."""
    kwargs = {"game": "Breakout", "max_frames_per_episode": 108_000}

    def first_life_lost(limit):
        envs = make_vector_env("Atari-v5", 1, seed=0, kwargs={**kwargs, "max_frames_per_episode": limit}, frame_stack=4)
        envs.reset(seed=3)
        for steps in range(1, 1000):
            _, _, terminated, truncated, infos = envs.step(np.zeros(1, np.int64))  # NOOP: the ball is missed
            if terminated[0] or truncated[0]:
                return envs.unwrapped.envs[0].unwrapped.ale.getEpisodeFrameNumber(), steps, infos, terminated | truncated
        raise AssertionError("no life lost in 1000 steps")

    after_reset, steps, infos, done = first_life_lost(108_000)
    assert finished_games(infos, done) == []  # a life, not the game
    lost_at = after_reset - 12  # the reset's no-op, FIRE and UP steps came after it, 4 frames each
    _, _, infos, done = first_life_lost(lost_at + 8)
    assert "game_score" not in infos.get("final_info", {})  # the step itself ended a life
    assert finished_games(infos, done) == [(0.0, 2 + steps + 2)]  # FIRE, UP; the agent's steps; no-op, FIRE


def test_every_listed_atari_game_has_the_rom_id_the_ale_knows():
    """The names env.game takes map back to the ALE's ids, digits included (TicTacToe3d is
    tic_tac_toe_3d, not tic_tac_toe3d); the ids themselves are taken as given."""
    from envs.atari import games, rom_id

    ids = {rom_id(game) for game in games()}
    assert "tic_tac_toe_3d" in ids and rom_id("TicTacToe3d") == rom_id("tic_tac_toe_3d") == "tic_tac_toe_3d"
    assert len(ids) == len(games()) >= 100


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


@pytest.mark.parametrize("build", [
    lambda **k: conv_net((12, 12, 3), 1, convs=[[4, 3, 2]], hidden=[8], **k),
    lambda **k: impala_cnn((12, 12, 3), 1, channels=[4], hidden=[8], **k),
], ids=["conv_net", "impala_cnn"])
def test_a_convolutional_critic_joins_the_action_to_the_flattened_convolutions(build):
    """Q(s, a) of a continuous agent's CNN critic (TD3, DDPG, SAC from pixels), by hand: the image's
    flattened convolutions concatenated with the action, then the dense layers."""
    net = build(action_dim=2, name="q")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 12, 12, 3)).astype(np.uint8)
    actions = rng.uniform(-1, 1, (3, 2)).astype(np.float32)
    flat = np.asarray(keras.Model(net.inputs[0], net.get_layer("q_flat").output)(images))
    (w0, b0), (w1, b1) = net.get_layer("q_h0").get_weights(), net.get_layer("q_out").get_weights()
    by_hand = np.maximum(np.concatenate([flat, actions], axis=1) @ w0 + b0, 0.0) @ w1 + b1
    np.testing.assert_allclose(np.asarray(net([images, actions])), by_hand, rtol=1e-5, atol=1e-5)


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
    shift = RandomShift(2, seed=0)  # its offsets' range: test_random_shift_moves_images_by_each_amount_...
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


class Scripted(gym.Env):
    """A stub env that plays a script: its reset gives frames[0], its i-th step frames[i] and
    rewards[i - 1], so what a wrapper makes of them is known by hand."""

    metadata = {"render_modes": []}

    def __init__(self, frames, rewards=None):
        self.frames = [np.asarray(f, np.uint8) for f in frames]
        self.rewards = list(rewards) if rewards is not None else [0.0] * (len(self.frames) - 1)
        self.observation_space = gym.spaces.Box(0, 255, self.frames[0].shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.frames[0], {}

    def step(self, action):
        self.t += 1
        return self.frames[min(self.t, len(self.frames) - 1)], self.rewards[self.t - 1], False, False, {}


def wrapper_chain(env) -> list[type]:
    chain = [type(env)]
    while hasattr(env, "env"):
        env = env.env
        chain.append(type(env))
    return chain


@pytest.mark.parametrize("frame_shape", [(2, 3), (2, 3, 1), (2, 3, 2)])
def test_a_frame_stack_starts_as_copies_of_the_first_frame_and_puts_the_newest_last(frame_shape):
    """k = 3 over frames f0, f1, f2, f3 (each pixel its own value): the reset's stack is (f0, f0, f0)
    on the channel axis, then (f0, f0, f1), (f0, f1, f2), (f1, f2, f3): the oldest dropped first."""
    from envs.pixels import StackFrames

    frames = [np.arange(np.prod(frame_shape)).reshape(frame_shape) + 50 * i for i in range(4)]
    f = [x.reshape(2, 3, -1) for x in frames]  # (H, W) frames take a channel axis of 1
    env = StackFrames(Scripted(frames), 3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 3, 3 * f[0].shape[-1]) == env.observation_space.shape and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, np.concatenate([f[0], f[0], f[0]], axis=-1))
    for newest in ([f[0], f[0], f[1]], [f[0], f[1], f[2]], [f[1], f[2], f[3]]):
        obs = env.step(0)[0]
        np.testing.assert_array_equal(obs, np.concatenate(newest, axis=-1))
    assert env.observation_space.contains(obs)


def test_atari_reward_clipping_keeps_each_rewards_sign():
    """Mnih et al. 2015 clip rewards to their sign: 4 -> 1, -7 -> -1, 0 -> 0, and 0.5 -> 1 (a
    sign, not a clip to [-1, 1], which would keep 0.5)."""
    from envs.atari import ClipReward

    env = ClipReward(Scripted([np.zeros((2, 2))] * 5, rewards=[4, -7, 0, 0.5]))
    env.reset(seed=0)
    assert [env.step(0)[1] for _ in range(4)] == [1.0, -1.0, 0.0, 1.0]


def test_atari_evaluation_plays_whole_games_for_the_unclipped_score(make_cfg):
    """The eval env of `agent=dqn env=atari` takes env.eval_kwargs over env.kwargs: no reward
    clipping and no end at a lost life (training's env has both), so an episode goes on past a
    lost life (NOOPs in Breakout miss the ball)."""
    from envs.atari import ClipReward, EpisodicLife
    from training.builder import eval_env_args

    cfg = make_cfg("agent=dqn", "env=atari")
    assert cfg.env.kwargs.clip_rewards is True and cfg.env.kwargs.terminal_on_life_loss is True  # training's
    args = eval_env_args(cfg)
    assert args["kwargs"]["clip_rewards"] is False and args["kwargs"]["terminal_on_life_loss"] is False
    assert args["kwargs"]["game"] == "Breakout" and args["frame_stack"] == 4
    env = make_env(cfg.env.id, seed=0, **args)
    chain = wrapper_chain(env)
    assert ClipReward not in chain and EpisodicLife not in chain, chain
    env.reset(seed=0)
    ale = env.unwrapped.ale
    lives = ale.lives()
    for _ in range(2000):
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated and not truncated, "the evaluation episode ended"
        if ale.lives() < lives:
            break
    assert ale.lives() == lives - 1, "no life was lost: the test saw no life loss"


@pytest.fixture(scope="module")
def pong():
    """Pong as conf/env/atari.yaml makes it, but for FIRE after a reset and the end at a lost life
    (whose reset goes on with the game): each reset(seed) restarts the game and plays only no-ops."""
    from envs.atari import make_atari

    return make_atari("Pong", fire_reset=False, terminal_on_life_loss=False)


def test_atari_resets_play_a_random_number_of_noops_up_to_30(pong):
    """SB3's (and gymnasium's) no-op starts: after a reset the emulator has run 1..30 frames (one
    per no-op, each drawn anew from the reset's seed), so 10 seeds give several starts."""
    frames = []
    for seed in range(10):
        pong.reset(seed=seed)
        frames.append(pong.unwrapped.ale.getEpisodeFrameNumber())
    assert all(1 <= f <= 30 for f in frames), frames
    assert len(set(frames)) >= 3, frames


def test_an_atari_step_is_four_emulator_frames(pong):
    pong.reset(seed=0)
    ale = pong.unwrapped.ale
    for _ in range(3):
        before = ale.getEpisodeFrameNumber()
        pong.step(0)
        assert ale.getEpisodeFrameNumber() - before == 4


def test_an_atari_game_is_cut_at_its_frame_limit_across_lives_and_then_starts_again(make_cfg):
    """The time limit counts one game's emulator frames (108k in Machado et al. 2018; 400 here):
    a training episode ended by a lost life does not restart the count, and the truncation that
    ends the game makes the next reset a new game (all lives, frames from 0), as SB3's
    EpisodicLifeEnv does. Before, a TimeLimit above the life-loss wrapper counted each life and
    left the game running after truncating it."""
    cfg = make_cfg("agent=dqn", "env=atari", "env.max_frames_per_episode=400")
    env = make_env(cfg.env.id, seed=0, max_episode_steps=cfg.env.max_episode_steps, kwargs=cfg.env.kwargs,
                   frame_stack=frame_stack(cfg))
    env.reset(seed=3)
    ale, lives_lost = env.unwrapped.ale, 0
    for _ in range(1000):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if truncated:
            break
        if terminated:  # a lost life: the game goes on
            lives_lost += 1
            env.reset()
    assert truncated and ale.getEpisodeFrameNumber() == 400 and lives_lost >= 1
    env.reset()
    assert ale.lives() == 5 and ale.getEpisodeFrameNumber() <= 4 * (30 + 2)  # no-ops, FIRE and UP of a new game


@pytest.mark.parametrize("overrides,prob", [((), 0.0), (("env.sticky_action_prob=0.25",), 0.25)])
def test_atari_sticky_actions_reach_the_emulator(make_cfg, overrides, prob):
    """env.sticky_action_prob is the ALE's repeat_action_probability: off by default (the DQN
    papers), 0.25 with Machado et al. 2018's protocol."""
    cfg = make_cfg("agent=dqn", "env=atari", *overrides)
    env = make_env(cfg.env.id, seed=0, kwargs=cfg.env.kwargs)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(prob)


def test_random_shift_moves_images_by_each_amount_from_minus_pad_to_pad():
    """RandomShift(pad=2) on 2000 copies of a 9x9 image whose pixels are all different: each copy
    is the edge-padded image cropped at some offset (row, column), recovered from where the centre
    pixel lands; the offsets drawn are exactly 0..4 on both axes (shifts of -2..+2 pixels)."""
    import tensorflow as tf

    from agents.augment import RandomShift

    pad, n = 2, 2000
    image = np.arange(81, dtype=np.uint8).reshape(9, 9, 1)
    moved = RandomShift(pad, seed=3)(tf.constant(np.repeat(image[None], n, axis=0))).numpy()
    rows, cols = np.nonzero(moved[..., 0] == image[4, 4, 0])[1:]  # the centre is never repeated into a border
    assert len(rows) == n, "each copy holds the centre pixel once"
    offsets = np.stack([4 + pad - rows, 4 + pad - cols], axis=1)  # out[i] = padded[offset + i]
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)), mode="edge")
    for copy, (r, c) in zip(moved[:100], offsets[:100]):
        np.testing.assert_array_equal(copy, padded[r:r + 9, c:c + 9])
    assert set(offsets[:, 0]) == set(offsets[:, 1]) == {0, 1, 2, 3, 4}
    counts = np.unique(offsets, axis=0, return_counts=True)[1]
    assert len(counts) == 25 and counts.min() > n / 25 / 2  # every pair, roughly uniformly


def test_random_shift_is_for_updates_only_acting_and_evaluation_see_the_frames_as_they_are():
    """A learner with DrQ's shift acts on the observations unshifted (its agent's own actions for
    them), and neither acting nor an evaluation draws from the shift's generator (a resumed run's
    shifts depend on updates only)."""
    import tensorflow as tf

    from agents.augment import RandomShift
    from agents.td3 import TD3
    from helpers import compiled
    from training.evaluation import evaluate

    keras.utils.set_random_seed(0)
    net = lambda *a, **k: conv_net(*a, convs=[[4, 3, 2]], hidden=[8], **k)  # noqa: E731
    agent = TD3((9, 9, 3), np.array([-1.0]), np.array([1.0]), net, np.random.default_rng(0), policy_delay=1)
    learner = compiled(agent, random_shift=RandomShift(2, seed=7))
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (16, 9, 9, 3)).astype(np.uint8)
    state = learner.random_shift.rng.state.numpy().copy()
    np.testing.assert_array_equal(learner.act(obs, explore=False), agent.act(obs, explore=False))
    frames = [rng.integers(0, 256, (9, 9, 3)).astype(np.uint8) for _ in range(6)]
    env = Scripted(frames, rewards=[1.0] * 5)
    env.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    env = gym.wrappers.TimeLimit(env, 5)
    assert evaluate(learner, env, episodes=2, seed=0)["return_mean"] == 5.0
    np.testing.assert_array_equal(learner.random_shift.rng.state.numpy(), state)
    assert not np.array_equal(RandomShift(2, seed=7)(tf.constant(obs)).numpy(), obs)  # a shift would show


@pytest.mark.parametrize("as_tensors", [False, True])
def test_mrqs_inputs_map_every_observation_of_the_batch_and_the_runs(as_tensors):
    """MR.Q's update takes a batch of transitions and runs of `horizon` steps: normalization and
    random shifts (`map_obs`) reach obs and next_obs of both, every step of the runs' next_obs,
    and leave the rest as it was (numpy on the host, tensors in the graph)."""
    import tensorflow as tf

    from agents.mrq.replay import RunsBatch, TransitionsAndRuns
    from buffers.types import Sequences

    rng = np.random.default_rng(0)
    b, horizon, shape = 3, 2, (4, 4, 2)
    obs = lambda *lead: rng.integers(0, 200, (*lead, *shape)).astype(np.uint8)  # noqa: E731
    batch = RunsBatch(
        batch=Batch(obs(b), np.arange(b, dtype=np.int64), np.ones(b, np.float32), obs(b), np.ones(b, np.float32),
                    np.ones(b, np.float32)),
        runs=Sequences(obs(b), np.zeros((b, horizon), np.int64), np.ones((b, horizon), np.float32), obs(b, horizon),
                       np.zeros((b, horizon), np.float32)),
        reward_scale=np.float32(1.0), terminates=np.float32(0.0))
    given = tf.nest.map_structure(tf.constant, batch) if as_tensors else batch

    def plus_one(x):
        assert len(x.shape) == 4, "a batch of images (B, H, W, C), as the shift takes them"
        return x + 1

    mapped = tf.nest.map_structure(np.asarray, TransitionsAndRuns(horizon=horizon, n_step=1).map_obs(given, plus_one))
    for name, before, after in (("obs", batch.batch.obs, mapped.batch.obs),
                                ("next_obs", batch.batch.next_obs, mapped.batch.next_obs),
                                ("runs.obs", batch.runs.obs, mapped.runs.obs),
                                ("runs.next_obs", batch.runs.next_obs, mapped.runs.next_obs)):
        np.testing.assert_array_equal(after, before + 1, err_msg=name)
    for before, after in ((batch.batch.action, mapped.batch.action), (batch.runs.action, mapped.runs.action),
                          (batch.runs.reward, mapped.runs.reward)):
        np.testing.assert_array_equal(after, before)


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
