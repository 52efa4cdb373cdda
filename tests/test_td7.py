"""TD7: each part against hand values (AvgL1Norm, SALE's encoder loss, LAP's loss and priorities,
value clipping, the target copies every N updates with the fixed encoders' order, the delayed actor,
the policy-checkpoint schedule), the switches that turn parts off, numpy acting of the composed
policy, training at episode ends through the loop, resume, evaluate and export, and bad input."""
import json
import signal
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from agents import losses
from agents.base import tracked
from agents.needs import LapReplay, Needs, PolicyCheckpoints
from agents.td7 import TD7
from training.assessment import Assessment, assess
from buffers.prioritized import PrioritizedReplay
from hand_nets import assert_first_adam_step, flat, numeric_gradient
from helpers import compiled, one, random_batch
from networks.numpy_forward import forward_fn, parse_program
from networks.sale import SALE, AvgL1Norm

OBS, ACT = 3, 2
LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
SMALL = dict(zs_dim=8, encoder_hidden=16, critic_hidden=16, actor_hidden=16)


def make(seed=0, **kwargs):
    import keras

    keras.utils.set_random_seed(seed)
    return TD7(OBS, LOW, HIGH, SALE(**SMALL), np.random.default_rng(seed), **kwargs)


def batch(rng, n=32):
    return random_batch(rng, OBS, LOW, HIGH, n)


def weights(model):
    return [w.numpy().copy() for w in model.weights]


def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# --- the pieces by hand ------------------------------------------------------------------------

def test_avg_l1_norm_and_lap_huber_by_hand():
    x = np.array([[1.0, -3.0], [0.0, 0.0]], np.float32)
    np.testing.assert_allclose(AvgL1Norm()(x).numpy(), [[0.5, -1.5], [0.0, 0.0]])  # mean |x| = 2; a zero row stays 0
    td = tf.constant([[0.5, 2.0], [1.0, 0.2]])
    # 0.5 * 0.25 + 2 (linear from 1, no offset), then 1 (x = 1 is linear) + 0.5 * 0.04, averaged over 2 rows
    assert float(losses.lap_huber(td, 1.0)) == pytest.approx(((0.125 + 2.0) + (1.0 + 0.02)) / 2)
    assert float(losses.squared_td(td)) == pytest.approx(((0.25 + 4.0) + (1.0 + 0.04)) / 2)


def test_lap_priorities_floor_power_no_weights_and_the_max_reset():
    buf = PrioritizedReplay(100, 1, 1, 0.99, np.random.default_rng(0), alpha=0.4, min_priority=1.0,
                            importance_weights=False, max_reset_every=3)
    for i in range(4):
        buf.add(np.full((1, 1), i), np.zeros((1, 1)), [0.0], np.zeros((1, 1)), [False], [False])
    b = buf.sample(4)
    np.testing.assert_array_equal(b.weight, np.ones(4))  # no importance weights
    idx = buf.last_indices.copy()
    buf.update_priorities(np.array([0.5, -3.0, 1.0, 9.0]))  # update 1: floors at 1, the sign dropped
    np.testing.assert_allclose(buf._tree.get(idx), np.array([1.0, 3.0, 1.0, 9.0]) ** 0.4, rtol=1e-12)
    assert buf._max_priority == 9.0
    buf.sample(4)
    buf.update_priorities(np.zeros(4))  # update 2: every sampled priority back to the floor
    assert buf._max_priority == 9.0
    buf.sample(4)
    buf.update_priorities(np.zeros(4))  # update 3: the reset, to the largest stored (all 1 now)
    assert buf._max_priority == pytest.approx(1.0)
    buf.add(np.ones((1, 1)), np.zeros((1, 1)), [0.0], np.zeros((1, 1)), [False], [False])
    assert buf._tree.get(np.array([4]))[0] == pytest.approx(1.0)  # a new transition gets the reset maximum
    other = PrioritizedReplay(100, 1, 1, 0.99, np.random.default_rng(0), alpha=0.4, min_priority=1.0,
                              importance_weights=False, max_reset_every=3)
    other.load_state_dict(buf.state_dict())
    assert other._updates_seen == 3


def test_policy_checkpoints_by_hand():
    """The author's maybe_train_and_checkpoint over a sequence of episodes, one update due per env
    step: a first episode always becomes the checkpoint; one below it trains without saving; at
    `after` updates the assessment grows to `episodes` and the checkpoint's lowest return is scaled
    by reset_weight."""
    settings = PolicyCheckpoints(episodes=3, after=250, reset_weight=0.9)
    s, done, due = Assessment(), 0, 0

    def end(length, ret):
        nonlocal s, done, due
        due += length
        s, train, keep = assess(s, ret, settings, done, due)
        n = due if train else 0
        done, due = done + n, due - n
        return n, keep

    assert (end(100, -50.0), s.best_min_return, done) == ((100, True), -50.0, 100)
    assert (end(80, -60.0), s.best_min_return) == ((80, False), -50.0)  # below the checkpoint: train, keep it
    assert (end(100, -40.0), s.max_episodes, done) == ((100, True), 3.0, 280)  # 180 <= 250 < 280: the reset
    assert s.best_min_return == pytest.approx(-40.0 * 0.9)
    assert (end(50, -30.0), s.episodes, due) == ((0, False), 1.0, 50)  # now 3 episodes assess a policy
    assert end(50, -20.0) == (0, False)
    assert (end(50, -25.0), s.best_min_return, s.episodes, s.min_return) == ((150, True), -30.0, 0.0, 1e8)
    assert (end(10, -31.0), done) == ((10, False), 440)  # one episode below it ends the assessment early


def test_the_policy_runs_in_numpy_as_one_program():
    """The acting network is the actor on the fixed encoder's zs, one Keras model of two: the numpy
    forward pass inlines both and agrees with Keras."""
    agent = make()
    model = agent.acting.network
    steps, _ = parse_program(model)
    assert {s.kind for s in steps} == {"dense", "avg_l1_norm", "concat"}
    obs = np.random.default_rng(1).normal(size=(5, OBS)).astype(np.float32)
    np.testing.assert_allclose(forward_fn(model)(model.get_weights(), obs), model(obs).numpy(), rtol=1e-5, atol=1e-6)
    zs = agent.fixed_encoder.zs(obs)
    np.testing.assert_allclose(model(obs).numpy(), agent.actor([tf.constant(obs), zs]).numpy(), rtol=1e-6)
    assert agent.acting.in_numpy and agent.eval_acting.in_numpy and agent.eval_acting is not agent.acting


def test_first_update_by_hand():
    """The encoder loss, the critic target (value clipping: the range starts at [0, 0], so the first
    target is the reward) and LAP's loss and priorities, from the networks as they were before it."""
    agent = make()
    b = batch(np.random.default_rng(2))
    action = (b.action - (HIGH + LOW) / 2) / ((HIGH - LOW) / 2)
    zs = agent.encoder.zs(b.obs).numpy()
    pred = agent.encoder.zsa(np.concatenate([zs, action], 1)).numpy()
    encoder_loss = np.mean((pred - agent.encoder.zs(b.next_obs).numpy()) ** 2)
    fixed_zs = agent.fixed_encoder.zs(b.obs).numpy()
    fixed_zsa = agent.fixed_encoder.zsa(np.concatenate([fixed_zs, action], 1)).numpy()
    q = agent.critic([tf.constant(x, tf.float32) for x in (b.obs, action, fixed_zsa, fixed_zs)]).numpy()
    td = np.abs(q - b.reward[:, None])
    metrics = agent.update(b)
    assert float(metrics["encoder_loss"]) == pytest.approx(encoder_loss, rel=1e-5)
    assert float(metrics["target_q"]) == pytest.approx(b.reward.mean(), rel=1e-6)
    assert float(metrics["critic_loss"]) == pytest.approx(np.mean(np.sum(np.where(td < 1, 0.5 * td**2, td), 1)), rel=1e-5)
    np.testing.assert_allclose(metrics["td_error"].numpy(), td.max(1), rtol=1e-5)
    # the range of the targets seen, held until the next target copy
    assert float(agent.value_max.numpy()) == pytest.approx(b.reward.max())
    assert float(agent.target_max.numpy()) == 0.0


def test_without_value_clipping_the_first_target_bootstraps():
    agent = make(value_clipping=False)
    b = batch(np.random.default_rng(2))
    assert abs(float(agent.update(b)["target_q"]) - b.reward.mean()) > 1e-3


def test_target_copies_every_n_updates_in_the_fixed_encoders_order():
    """Update 3 of target_update_every=3: the targets become the networks, the fixed target encoder
    the fixed encoder as it was, the fixed encoder the current encoder, and the clipping range the
    targets' range. Before it none moves; the actor steps on every second update."""
    learner = compiled(make(target_update_every=3))
    agent, rng = learner.agent, np.random.default_rng(3)
    fixed0, actor0 = weights(agent.fixed_encoder.zs) + weights(agent.fixed_encoder.zsa), weights(agent.actor)
    targets0 = weights(agent.actor_target) + weights(agent.critic_target) + weights(agent.fixed_target_encoder.zs)
    for n in (1, 2):
        learner.update(one(batch(rng)))
        assert same(actor0, weights(agent.actor)) == (n == 1)
        assert same(targets0, weights(agent.actor_target) + weights(agent.critic_target) +
                    weights(agent.fixed_target_encoder.zs))
        assert same(fixed0, weights(agent.fixed_encoder.zs) + weights(agent.fixed_encoder.zsa))
    learner.update(one(batch(rng)))
    assert same(weights(agent.actor_target), weights(agent.actor))
    assert same(weights(agent.critic_target), weights(agent.critic))
    assert same(weights(agent.fixed_target_encoder.zs) + weights(agent.fixed_target_encoder.zsa), fixed0)
    assert same(weights(agent.fixed_encoder.zs), weights(agent.encoder.zs))
    assert not same(fixed0[:len(agent.encoder.zs.weights)], weights(agent.encoder.zs))  # the encoder learned
    assert float(agent.target_max.numpy()) == float(agent.value_max.numpy())
    assert learner.update_trace_count == 1
    # acting holds the weights the last update handed back: the actor on the new fixed encoder
    obs = rng.normal(size=(4, OBS)).astype(np.float32)
    np.testing.assert_allclose(agent.acting(obs), agent.acting.network(obs).numpy(), rtol=1e-5, atol=1e-6)


# --- the actor's step and the bootstrapped target by value, past the target copies ----------------

HAND_SALE = dict(zs_dim=4, encoder_hidden=8, critic_hidden=8, actor_hidden=8)
HAND_LR = dict(actor_lr=0.01, critic_lr=0.01, encoder_lr=0.01)
HAND_NOISE, HAND_CLIP = 0.4, 0.5  # the smoothing noise's std and clip (in [-1, 1] action units)
HAND_EVERY, HAND_UPDATES = 3, 5  # target copies at update 3 (and 6); the actor steps at updates 2 and 4
ENCODERS = ("encoder", "fixed_encoder", "fixed_target_encoder")


def hand_models(agent) -> dict:
    models = {name: getattr(agent, name) for name in ("actor", "actor_target", "critic", "critic_target")}
    for name in ENCODERS:
        models[f"{name}_zs"], models[f"{name}_zsa"] = getattr(agent, name).zs, getattr(agent, name).zsa
    return models


def np_dense(values, layer, x):
    h = x @ values[layer.kernel.path] + values[layer.bias.path]
    return {"linear": lambda: h, "relu": lambda: np.maximum(h, 0.0), "tanh": lambda: np.tanh(h),
            "elu": lambda: np.where(h > 0, h, np.expm1(np.minimum(h, 0.0)))}[layer.activation.__name__]()


def avg_l1(x):
    return x / np.maximum(np.mean(np.abs(x), axis=-1, keepdims=True), 1e-8)


def np_layers(model, values, x, *suffixes):
    for suffix in suffixes:
        x = np_dense(values, model.get_layer(f"{model.name}_{suffix}"), x)
    return x


def np_zs(model, values, obs):
    """SALE's f(s): two hidden layers, the output scaled by AvgL1Norm."""
    return avg_l1(np_layers(model, values, obs, "h0", "h1", "out"))


def np_zsa(model, values, zs, action):
    """SALE's g(zs, a) on [zs, a]."""
    return np_layers(model, values, np.concatenate([zs, action], 1), "h0", "h1", "out")


def np_actor(model, values, obs, zs):
    """pi(s, zs) in [-1, 1]: [AvgL1Norm(l0(s)), zs] through l1, l2 and the tanh output."""
    x = avg_l1(np_layers(model, values, obs, "l0"))
    return np_layers(model, values, np.concatenate([x, zs], 1), "l1", "l2", "out")


def np_critic(model, values, obs, action, zsa, zs):
    """(B, 2): per head, [AvgL1Norm(l0([s, a])), zsa, zs] through l1, l2 and the output."""
    heads = []
    for k in (1, 2):
        x = avg_l1(np_layers(model, values, np.concatenate([obs, action], 1), f"q{k}_l0"))
        heads.append(np_layers(model, values, np.concatenate([x, zsa, zs], 1), f"q{k}_l1", f"q{k}_l2", f"q{k}_out"))
    return np.concatenate(heads, 1)


def hand_target(agent, v, b, noise, value_range, encoder="fixed_target_encoder", actor="actor_target",
                critic="critic_target", smoothing=True, noise_clip=HAND_CLIP, clipping=True):
    """r + discount * clip(min(Q1', Q2')(s', a'~), range) from the values `v` by path: a'~ = clip(pi'(s', zs')
    + clip(noise, -c, c), -1, 1), zs' and zsa' of the encoder named; TD7's: the target actor and critic,
    the fixed target encoder. Also the next value before its clipping."""
    enc_zs, enc_zsa = getattr(agent, encoder).zs, getattr(agent, encoder).zsa
    zs = np_zs(enc_zs, v, b.next_obs)
    clipped_noise = np.clip(noise, -noise_clip, noise_clip) if smoothing else 0.0 * noise
    next_action = np.clip(np_actor(getattr(agent, actor), v, b.next_obs, zs) + clipped_noise, -1.0, 1.0)
    next_q = np_critic(getattr(agent, critic), v, b.next_obs, next_action, np_zsa(enc_zsa, v, zs, next_action),
                       zs).min(1)
    value = np.clip(next_q, *value_range) if clipping else next_q
    return b.reward + b.discount * value, next_q


def hand_q(agent, v, b):
    """Q(s, a) of both heads on the fixed encoder's embeddings, the action scaled to [-1, 1]."""
    action = (b.action - (HIGH + LOW) / 2) / ((HIGH - LOW) / 2)
    zs = np_zs(agent.fixed_encoder.zs, v, b.obs)
    return np_critic(agent.critic, v, b.obs, action, np_zsa(agent.fixed_encoder.zsa, v, zs, action), zs)


@pytest.fixture(scope="module")
def hand_run():
    """Five updates of a TD7 with small SALE networks whose every network (the three encoders
    included) starts with weights of its own, target_update_every=3 (a copy at update 3) and
    policy_delay=2 (the actor steps at 2 and 4); rewards N(-1.2, 0.3**2), a narrow range across
    which the critics' next values spread, so that value clipping cuts them on both sides. Every
    variable's value (by path) before each update and after the last, each update's generator
    state, clipping ranges, batch and metrics."""
    import keras

    keras.utils.set_random_seed(0)
    agent = TD7(OBS, LOW, HIGH, SALE(**HAND_SALE), np.random.default_rng(0), target_update_every=HAND_EVERY,
                policy_delay=2, target_noise=HAND_NOISE, noise_clip=HAND_CLIP, **HAND_LR)
    models = hand_models(agent)
    rng = np.random.default_rng(20)
    for model in models.values():
        model.set_weights([rng.normal(0.0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])

    def values():
        return {v.path: np.array(v.numpy(), np.float64) for m in models.values() for v in m.weights}

    before, states, batches, metrics, ranges = [], [], [], [], []
    for _ in range(HAND_UPDATES):
        b = batch(rng, 8)
        b = b._replace(reward=(0.3 * b.reward - 1.2).astype(np.float32))
        before.append(values())
        states.append(agent._tf_rng.state.numpy())
        ranges.append((float(agent.target_min.numpy()), float(agent.target_max.numpy()),
                       float(agent.value_min.numpy()), float(agent.value_max.numpy())))
        batches.append(b)
        metrics.append({k: np.asarray(v) for k, v in agent.update(b).items()})
    return types.SimpleNamespace(agent=agent, before=before, after=values(), states=states, batches=batches,
                                 metrics=metrics, ranges=ranges)


def replay_noise(agent, state, n):
    probe = tf.random.Generator.from_state(state, agent._tf_rng.algorithm)
    return probe.normal([n, ACT]).numpy() * HAND_NOISE


def test_the_target_by_hand_past_the_target_copy(hand_run):
    """Every update's target r + discount * clip(min(Q1', Q2')(s', a'~), [min, max]) recomputed in
    numpy from the networks before it: the target actor and critic, the fixed target encoder's
    embeddings, the smoothing noise replayed from a copy of the generator and clipped, the next
    value clipped to the range recorded up to the last target copy ([0, 0] until update 3's copy,
    then that of the targets of updates 1-3), checked per sample through td_error (max over the
    heads of |Q(s, a) - y|) and on average through target_q. At update 5 the three encoders all
    differ, the actor and critic differ from their targets, clipping cuts next values on both sides
    and the noise clip binds, so the target without smoothing, without the noise clip, without value
    clipping, on another encoder or on the online actor or critic would be another number."""
    run, agent = hand_run, hand_run.agent
    targets = []
    for t, (v, b, m) in enumerate(zip(run.before, run.batches, run.metrics, strict=True), start=1):
        noise = replay_noise(agent, run.states[t - 1], len(b.reward))
        seen = targets[:len(b.reward) * HAND_EVERY * ((t - 1) // HAND_EVERY)]  # the targets up to the last copy
        value_range = (min(seen), max(seen)) if seen else (0.0, 0.0)  # the range starts at [0, 0]
        np.testing.assert_allclose(run.ranges[t - 1][:2], value_range, rtol=1e-5, atol=1e-6,
                                   err_msg=f"the clipping range at update {t}")
        np.testing.assert_allclose(run.ranges[t - 1][2:], (min(targets), max(targets)) if targets else (1e8, -1e8),
                                   rtol=1e-5, err_msg=f"the range of the targets seen before update {t}")
        y, next_q = hand_target(agent, v, b, noise, value_range)
        q = hand_q(agent, v, b)
        np.testing.assert_allclose(m["td_error"], np.abs(q - y[:, None]).max(1), rtol=1e-4, atol=1e-5,
                                   err_msg=f"update {t}'s per-sample target")
        np.testing.assert_allclose(m["target_q"], y.mean(), rtol=1e-4, atol=1e-5, err_msg=f"update {t}'s target_q")
        targets.extend(y.tolist())
    assert float(agent.value_max.numpy()) == pytest.approx(max(targets), rel=1e-5)
    assert float(agent.value_min.numpy()) == pytest.approx(min(targets), rel=1e-5)

    # update 5 is not degenerate: each of the parts changes its target
    v, b = run.before[4], run.batches[4]
    noise = replay_noise(agent, run.states[4], len(b.reward))
    lo, hi = run.ranges[4][:2]
    y, next_q = hand_target(agent, v, b, noise, (lo, hi))
    assert hi - lo > 0.5 and np.any(next_q < lo - 0.05) and np.any(next_q > hi + 0.05)
    assert np.any((next_q > lo + 0.05) & (next_q < hi - 0.05))
    assert np.any(np.abs(noise) > HAND_CLIP)
    online = {**v, **{k: x for k, x in run.after.items() if k.startswith("encoder_")}}  # after update 5's encoder step
    for name, other in (("no smoothing", hand_target(agent, v, b, noise, (lo, hi), smoothing=False)[0]),
                        ("no noise clip", hand_target(agent, v, b, noise, (lo, hi), noise_clip=np.inf)[0]),
                        ("no value clipping", hand_target(agent, v, b, noise, (lo, hi), clipping=False)[0]),
                        ("the online actor", hand_target(agent, v, b, noise, (lo, hi), actor="actor")[0]),
                        ("the online critic", hand_target(agent, v, b, noise, (lo, hi), critic="critic")[0]),
                        ("the fixed encoder", hand_target(agent, v, b, noise, (lo, hi), encoder="fixed_encoder")[0]),
                        ("the online encoder", hand_target(agent, online, b, noise, (lo, hi), encoder="encoder")[0])):
        assert np.abs(other - y).max() > 0.05, name


def test_the_actor_steps_on_the_mean_of_both_critics_by_hand(hand_run):
    """Update 2, the actor's first step: actor_loss = -mean over the batch and both heads of
    Q(s, pi(s, zs), zsa, zs) with the critic after its step and the fixed encoder's embeddings
    (sfujim/TD7: `-self.critic(state, actor, zsa, zs).mean()`), and each actor weight moves by
    Adam's first step, -lr * sign(g), g that loss's gradient by central differences. Q1 alone, or
    the sign flipped, give another step; updates 1 and 3 leave the actor alone."""
    run, agent = hand_run, hand_run.agent
    v0, v1, b, m = run.before[1], run.before[2], run.batches[1], run.metrics[1]
    paths = [w.path for w in agent.actor.trainable_variables]
    assert all(np.array_equal(run.before[0][p], v0[p]) for p in paths)  # update 1: no actor step
    assert all(np.array_equal(v1[p], run.before[3][p]) for p in paths)  # update 3: none
    critic = {w.path: v1[w.path] for w in agent.critic.weights}  # after update 2's step
    zs = np_zs(agent.fixed_encoder.zs, v0, b.obs)  # the fixed encoder, not the encoder that stepped

    def actor_loss(trainable, heads=(0, 1)):
        values = {**v0, **critic, **dict(zip(paths, trainable))}
        a = np_actor(agent.actor, values, b.obs, zs)
        q = np_critic(agent.critic, values, b.obs, a, np_zsa(agent.fixed_encoder.zsa, values, zs, a), zs)
        return -np.mean(q[:, list(heads)])

    theta0 = [v0[p] for p in paths]
    g = flat(numeric_gradient(actor_loss, theta0))
    g_q1 = flat(numeric_gradient(lambda t: actor_loss(t, heads=(0,)), theta0))
    step = flat([v1[p] for p in paths]) - flat(theta0)
    assert_first_adam_step(step, g, g_q1, HAND_LR["actor_lr"], "the actor on Q1 alone")
    np.testing.assert_allclose(m["actor_loss"], actor_loss(theta0), rtol=1e-4, atol=1e-5,
                               err_msg="actor_loss: the mean of both heads")


def test_switches_remove_their_parts():
    plain = make(sale=False, fixed_encoders=False, lap=False, checkpoints=False)
    assert plain.encoder is None and plain.eval_acting is plain.acting and plain.needs == Needs(lap=False)
    full = make()
    assert full.needs == Needs(evaluation=full.eval_acting, policy_checkpoints=PolicyCheckpoints(), lap=LapReplay(1.0, 250))
    assert [len(m.inputs) for m in (plain.actor, plain.critic)] == [1, 2]
    b = batch(np.random.default_rng(4))
    q = plain.critic([tf.constant(b.obs), tf.constant((b.action - (HIGH + LOW) / 2) / ((HIGH - LOW) / 2))]).numpy()
    metrics = plain.update(b)
    assert float(metrics["critic_loss"]) == pytest.approx(np.mean(np.sum((q - b.reward[:, None]) ** 2, 1)), rel=1e-5)
    assert float(metrics["encoder_loss"]) == 0.0
    shared = make(fixed_encoders=False)
    assert shared.fixed_encoder is shared.encoder and "fixed_encoder_zs" not in tracked(shared)


def test_a_kept_policy_is_what_evaluation_acts_with():
    learner = compiled(make(target_update_every=2))
    agent, rng = learner.agent, np.random.default_rng(5)
    assert agent.needs.evaluation is agent.eval_acting and agent.needs.policy_checkpoints == PolicyCheckpoints()
    obs = rng.normal(size=(4, OBS)).astype(np.float32)
    for _ in range(2):
        learner.update(one(batch(rng)))
    assert not np.allclose(agent.act(obs, False), agent.box.from_unit(agent.acting(obs)))  # still the initial actor
    learner.keep_policy()
    np.testing.assert_array_equal(agent.act(obs, False), agent.box.from_unit(agent.acting(obs)).astype(np.float32))
    saved = agent.act(obs, False)
    for _ in range(2):
        learner.update(one(batch(rng)))
    assert not np.allclose(agent.act(obs, True), saved)  # the actor moved; evaluation keeps the kept one
    np.testing.assert_array_equal(agent.act(obs, False), saved)
    exported = agent.policy(tf.constant(obs)).numpy()
    np.testing.assert_allclose(exported, saved, rtol=1e-5, atol=1e-6)


def test_checkpoint_round_trip(tmp_path):
    learner = compiled(make(target_update_every=2))
    rng = np.random.default_rng(6)
    for _ in range(3):
        learner.update(one(batch(rng)))
    learner.keep_policy()
    agent = learner.agent
    path = tf.train.Checkpoint(**tracked(agent)).write(str(tmp_path / "c"))
    other = make(seed=11, target_update_every=2)
    tf.train.Checkpoint(**tracked(other)).read(path).assert_consumed()
    for name in ("actor", "critic", "critic_target"):
        assert same(weights(getattr(agent, name)), weights(getattr(other, name)))
    assert same(weights(agent.eval_acting.network), weights(other.eval_acting.network))
    assert float(other.target_max.numpy()) == float(agent.target_max.numpy())


def test_td7_refuses_bad_settings():
    with pytest.raises(ValueError, match="network=sale"):
        TD7(OBS, LOW, HIGH, lambda *a, **k: None, np.random.default_rng(0))
    with pytest.raises(ValueError, match="policy_delay must be an integer >= 1"):
        make(policy_delay=0)
    with pytest.raises(ValueError, match="zs_dim must be a positive integer"):
        SALE(zs_dim=0)
    with pytest.raises(ValueError, match="encoder_hidden must be a positive integer"):
        SALE(encoder_hidden=-4)


# --- through the loop, train.py and evaluate.py ----------------------------------------------------

def test_the_lap_switch_names_what_runs(make_cfg):
    """lap=true is LAP's loss on LAP's replay, whose floor and reset period come from the agent;
    lap=false is TD3's squared error on uniform replay (the paper's "TD7 without LAP") or PER with
    its importance weights, which the squared error then applies (by hand below); anything else is
    refused, naming the mismatch."""
    from buffers.prioritized import PrioritizedReplay
    from buffers.uniform import UniformReplay
    from training.fit import check_lap
    from training.config import ConfigError

    cfg = make_cfg("agent=td7", "agent.target_update_every=100", "agent.min_priority=0.5")
    assert cfg.buffer.max_reset_every == 100 and cfg.buffer.min_priority == 0.5

    rng = np.random.default_rng(0)

    def lap_replay(**kw):
        settings = dict(alpha=0.4, min_priority=1.0, importance_weights=False, max_reset_every=250) | kw
        return PrioritizedReplay(64, OBS, len(LOW), 0.99, rng, **settings)

    uniform, per = UniformReplay(64, OBS, len(LOW), 0.99, rng), PrioritizedReplay(64, OBS, len(LOW), 0.99, rng)
    td7, without = make(), make(lap=False)
    check_lap(td7.needs.lap, lap_replay())
    check_lap(without.needs.lap, uniform)
    check_lap(without.needs.lap, per)
    for agent, buffer, message in [
        (without, lap_replay(), "neither TD7 nor TD7 without LAP"),
        (td7, uniform, "this buffer samples uniformly"),
        (td7, per, "this buffer weighs its samples by importance weights"),
        (td7, lap_replay(min_priority=0.5), r"buffer.min_priority=0.5, not agent.min_priority=1"),
        (td7, lap_replay(max_reset_every=100), r"buffer.max_reset_every=100 updates, not at the agent's target "
                                               r"updates \(agent.target_update_every=250\)"),
    ]:
        with pytest.raises(ConfigError, match=message):
            check_lap(agent.needs.lap, buffer)

    # without LAP the critics' loss reads the batch's importance weights: doubled weights, doubled loss
    b = batch(np.random.default_rng(1), 8)
    plain = make(lap=False).update(b._replace(weight=np.ones(8, np.float32)))["critic_loss"]
    doubled = make(lap=False).update(b._replace(weight=np.full(8, 2.0, np.float32)))["critic_loss"]
    assert float(doubled) == pytest.approx(2.0 * float(plain), rel=1e-5) and float(plain) > 0
    td = tf.constant([[1.0, 2.0], [3.0, 0.5]])
    assert float(losses.squared_td(td, tf.constant([0.5, 2.0]))) == pytest.approx((0.5 * 5.0 + 2.0 * 9.25) / 2)
    assert float(losses.squared_td(td)) == pytest.approx((5.0 + 9.25) / 2)


TINY = ["agent=td7", "env=pendulum", "network.zs_dim=8", "network.encoder_hidden=16", "network.critic_hidden=16",
        "network.actor_hidden=16", "batch_size=32", "eval_episodes=1", "deterministic=true", "logger.progress=false",
        "checkpoint.every=0"]


TD3 = ["agent=td3", "env=pendulum", "network.hidden=[16,16]", "batch_size=32", "eval_episodes=1",
       "logger.progress=false", "checkpoint.every=0", "train_at_episode_ends=true"]


@pytest.mark.parametrize("steps_per_call", [0, 400])
@pytest.mark.parametrize("agent,ratio", [("td7", 1.0), ("td3", 1.0), ("td3", 0.5)])
def test_updates_come_at_episode_ends(make_cfg, agent, ratio, steps_per_call):
    """Pendulum's episodes are 200 steps. As in the author's loop, the policy acts from the first
    episode end past learning_starts (1200: the episode ending at 1000 does not count) and trains at
    the next ones: two phases of 200 * updates_per_step updates at 1400 and 1600, none in between.
    TD7 asks for it with its policy checkpoints (each first episode is kept: each trains), any
    agent with train_at_episode_ends=true; TD7's LAP buffer saw one batch per update."""
    from helpers import Records, run_loop

    records = Records()
    base = TINY if agent == "td7" else [*TD3, f"updates_per_step={ratio}"]
    cfg = make_cfg(*base, "total_steps=1600", "learning_starts=1000", "eval_every=1600", "logger.every=100",
                   f"speed.steps_per_call={steps_per_call}")
    summary, run = run_loop(cfg, records)
    assert run.settings.train_at_episode_ends
    assert summary["updates"] == 400 * ratio
    updates = {step: m["updates"] for step, m in records.rows["update"]}
    assert [updates[s] for s in (1200, 1300, 1400, 1500, 1600)] == [0, 0, 200 * ratio, 200 * ratio, 400 * ratio]
    if agent == "td7":
        assert run.buffer._updates_seen == 400  # every update's priorities came back before the next batch


def _train(run_dir, *overrides):
    from helpers import ROOT, with_tests_importable

    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *TINY, "learning_starts=200", "eval_every=200",
           "agent.target_update_every=50", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=with_tests_importable())


def test_a_run_stopped_between_an_episode_ends_updates_resumes_bit_exact_and_exports(tmp_path):
    """SIGTERM at step 600, whose episode end makes 200 updates due: the run stops after the first
    of them, keeps the other 199 due in its checkpoint, and does them first when it continues. It
    ends where the uninterrupted 1000-step run does: networks, encoders, checkpoint policy,
    schedule, clipping range and LAP priorities. Then evaluate.py acts with, and exports, the
    checkpoint policy."""
    from helpers import evaluate, final_weights, resume

    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    evals = ["total_steps=1000", "eval_every=1000"]  # no evaluation episode reaches the signalling step
    proc = _train(whole, *evals)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _train(stopped, *evals, "env.id=signalling_env:SignalsAt-v0", "+env.kwargs.base=Pendulum-v1",
                  "+env.kwargs.at=600")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    state = json.loads(next((stopped / "checkpoints").glob("step_0000000600/state.json")).read_text())
    assert state["loop"]["pending"] == 199, state["loop"]
    proc = resume(stopped)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = final_weights(whole), final_weights(stopped)
    assert a.keys() == b.keys() and any("checkpoint_policy" in k for k in a)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["final_return"] == json.loads((stopped / "summary.json").read_text())["final_return"]
    assert summary["updates"] == 600  # the episodes ending at 600, 800 and 1000 (the policy acts from 400)

    proc = evaluate(f"run_dir={whole}", "episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = tf.saved_model.load(str(whole / "export" / "latest"))
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    assert exported(obs).numpy().shape == (4, 1)
