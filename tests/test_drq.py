"""DR.Q (agent=drq): MR.Q's agent with DR.Q's settings. Its own features against values computed by
hand: the InfoNCE term (and its masking as DR.Q's code has it), the faded replay's sampling
distribution, the preset's values against the authors' code; and a learning test."""
import math

import numpy as np
import pytest
import tensorflow as tf
from omegaconf import OmegaConf

from agents.mrq import losses
from buffers.prioritized import PrioritizedReplay


def test_info_nce_by_hand():
    """Cosine similarities / temperature as logits, the cross-entropy of each row's own column."""
    pred = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, -2.0]])
    target = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    logits = unit(pred) @ unit(target).T / 0.5
    expected = -np.diag(logits - np.log(np.exp(logits).sum(axis=1, keepdims=True)))
    got = losses.info_nce(tf.constant(pred, tf.float32), tf.constant(target, tf.float32), 0.5)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_the_rollouts_info_nce_term_is_masked_as_dr_qs_code_masks_it():
    """Three samples unrolled 2 steps by a model that adds the action; the second terminates at its
    first step. Each step's term is the batch's mean InfoNCE times the share still alive (DR.Q's (B,)
    loss times its (B, 1) mask, averaged), weighted 0.5 into the total; weight 0: no term."""
    def model(zs, action):
        nxt = zs + action
        return nxt[:, :1], nxt, tf.zeros([tf.shape(zs)[0], 2])

    zs = tf.constant([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    actions = tf.constant([[[0.5, 0.0], [0.0, 0.5]], [[0.0, 0.5], [0.5, 0.0]], [[-1.0, 0.0], [0.0, 1.0]]])
    next_zs = tf.constant(np.random.default_rng(0).normal(size=(3, 2, 2)), tf.float32)
    terminated = tf.constant([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    reward, bins = tf.zeros([3, 2]), tf.constant([0.0, 1.0])
    total, parts = losses.model_rollout_loss(model, zs, actions, next_zs, reward, terminated, bins, 0.0, 0.0,
                                             tf.constant(0.0), infonce_weight=0.5, infonce_temperature=0.1)
    step1, step2 = zs + actions[:, 0], zs + actions[:, 0] + actions[:, 1]
    expected = (np.mean(losses.info_nce(step1, next_zs[:, 0], 0.1))
                + np.mean(losses.info_nce(step2, next_zs[:, 1], 0.1)) * (2 / 3))
    np.testing.assert_allclose(parts["infonce"], expected, rtol=1e-5)
    np.testing.assert_allclose(total, 0.5 * expected, rtol=1e-5)
    _, off = losses.model_rollout_loss(model, zs, actions, next_zs, reward, terminated, bins, 0.0, 0.0, tf.constant(0.0))
    assert "infonce" not in off


def filled(capacity: int, rows: int, fade: float, seed: int = 0) -> tuple[PrioritizedReplay, np.ndarray]:
    """A buffer of `rows` transitions added one at a time (the ring wrapped when rows > capacity),
    with random LAP priorities; its leaves (priority ** alpha) by row."""
    buf = PrioritizedReplay(capacity, 2, 1, 0.99, np.random.default_rng(seed), alpha=0.4, min_priority=1.0,
                            importance_weights=False, stratified=False, fade=fade, fade_floor=0.3)
    for t in range(rows):
        buf.add(np.full((1, 2), t, np.float32), np.zeros((1, 1), np.float32), np.zeros(1), np.zeros((1, 2), np.float32),
                np.zeros(1, bool), np.zeros(1, bool))
        if t % 3 == 2:
            buf.sample(2)
            buf.update_priorities(np.random.default_rng(t).uniform(0, 5, 2))
    return buf, buf._tree.get(np.arange(capacity))


@pytest.mark.parametrize("rows", [30, 77])
def test_faded_replay_draws_each_row_by_priority_times_its_age_fade_floored(rows):
    """P(row) = leaf x max(0.9**age, 0.3) / sum, age = rows added since (0 the newest; 12 rows above
    the floor), before and after the ring wraps: the rows at a fine grid of the faded mass land on
    each row as often as the dense formula says (to the grid's resolution), with the value batches'
    draw and the encoder's runs' draw alike."""
    buf, leaves = filled(40, rows, fade=0.9)
    newest = (rows - 1) % 40
    age = (newest - np.arange(40)) % 40
    weight = leaves * np.maximum(0.9 ** age, 0.3) * (np.arange(40) < min(rows, 40))
    expected = weight / weight.sum()
    mass = buf._mass()
    assert mass[0] == pytest.approx(weight.sum(), rel=1e-9)
    n = 400_000
    rows_hit = buf._rows_at((np.arange(n) + 0.5) / n * mass[0], mass)
    np.testing.assert_allclose(np.bincount(rows_hit, minlength=40) / n, expected, atol=2 / n)
    draws = np.bincount(buf._draw(200_000), minlength=40) / 200_000  # the runs' starts: the same distribution
    assert np.abs(draws - expected).max() < 0.005
    assert expected[newest] / leaves[newest] > 3 * expected[(newest + 20) % 40] / max(leaves[(newest + 20) % 40], 1e-12) * 0.99


def test_without_fading_the_buffer_samples_as_lap():
    plain, leaves = filled(40, 77, fade=1.0)
    mass = plain._mass()
    assert mass[1] is None and mass[0] == pytest.approx(leaves.sum())


def test_the_preset_is_dr_qs_code():
    """conf/agent/drq.yaml against the authors' DRQ/DRQ.py Hyperparameters and buffer.py (cc307a5)."""
    from hydra import compose, initialize_config_dir

    from helpers import ROOT

    with initialize_config_dir(f"{ROOT}/conf", version_base="1.3"):
        cfg = compose("config", overrides=["agent=drq", "env=dmc"])
    assert cfg.agent._target_ == "agents.mrq.MRQ" and cfg.network.encoder_hidden == 750
    assert OmegaConf.to_container(cfg.agent)["infonce_weight"] == 0.1 and cfg.agent.infonce_temperature == 0.1
    assert (cfg.agent.done_weight, cfg.agent.pre_activ_weight, cfg.agent.value_grad_clip) == (0, 0, 0)
    assert cfg.agent.reward_scaling is False and cfg.agent.encoder_lr == 3e-4
    assert (cfg.agent.encoder_wd, cfg.agent.value_wd, cfg.agent.policy_wd) == (0.01, 0.01, 0.01)
    assert (cfg.buffer.fade, cfg.buffer.fade_floor) == (0.9999, 0.1)
    young = PrioritizedReplay(10, 2, 1, 0.99, np.random.default_rng(0), fade=cfg.buffer.fade,
                              fade_floor=cfg.buffer.fade_floor)._young_extra
    assert len(young) == 23025 and young[-1] > 0 and 0.9999**23025 < 0.1  # ages 0 to 23,024 above the floor
    assert (cfg.env.action_repeat, cfg.env.eval_every) == (2, 5000)  # MR.Q's DMC protocol, unchanged by DR.Q
    import registry

    agent_settings = OmegaConf.to_container(cfg.agent)
    assert {k: agent_settings[k] for k in registry.DRQ_SETTINGS} == registry.DRQ_SETTINGS  # the registry's DR.Q is it


@pytest.mark.slow
def test_drq_learns_inverted_pendulum_within_4k_steps(make_cfg):
    """DR.Q with networks of 64 balances InvertedPendulum-v5 (1000 steps; a random policy falls in
    about 5) after 3k updates, and its InfoNCE term did its work: the predicted embeddings pick their
    own next state out of the batch, at each of the 5 steps with a probability above 7 / 256, 7 times
    chance (the term starts at 5 x ln 256, chance at every step; measured: 14.3). (Not
    Pendulum, MR.Q's learning test: without reward scaling, which DR.Q drops, neither MR.Q nor DR.Q
    learns it in 6k steps; its returns are hundreds of times its rewards.)"""
    from helpers import Records, run_loop

    widths = [f"network.{k}={w}" for k, w in (("zs_dim", 64), ("za_dim", 32), ("zsa_dim", 64), ("encoder_hidden", 64),
                                               ("value_hidden", 64), ("policy_hidden", 64))]
    cfg = make_cfg("agent=drq", "env=inverted_pendulum", "total_steps=4000", "learning_starts=1000", "eval_every=4000",
                   "eval_episodes=5", "seed=0", "logger.progress=false", *widths)
    records = Records()
    summary, _ = run_loop(cfg, records)
    assert summary["final_return"] >= 900, summary
    infonce = [m["infonce_loss"] for _, m in records.rows["update"] if "infonce_loss" in m]
    assert infonce and infonce[-1] < 5 * (math.log(256) - math.log(7)), infonce
