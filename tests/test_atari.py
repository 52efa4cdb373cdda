"""Atari's env as conf/env/atari.yaml makes it: lives, FIRE, no-ops, frame skip and limit, sticky
actions, reward clipping, frame stacks, whole-game scores in training and evaluation, game names."""
import numpy as np
import pytest
from helpers import Scripted

from envs.factory import finished_games, make_env, make_vector_env
from training.config import frame_stack


def test_atari_training_episodes_end_at_a_lost_life_and_the_game_goes_on():
    """Training: a lost life terminates the episode and the next reset continues the game (one life
    fewer); rewards are clipped. Evaluation's kwargs: whole games, the game's score."""
    train = make_env("Atari-v5", seed=0, kwargs={"game": "Breakout"}, frame_stack=4)
    obs, _ = train.reset(seed=0)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    ale = train.unwrapped.ale
    lives, terminated, steps = ale.lives(), False, 0
    while not terminated and steps < 2000:  # a life is lost within a few hundred; without its end, never FIRE again
        obs, reward, terminated, truncated, _ = train.step(0)  # NOOP: the ball is missed
        assert reward in (0.0, 1.0)
        steps += 1
    assert terminated, "no episode end in 2000 NOOP steps: a lost life must end a training episode"
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
