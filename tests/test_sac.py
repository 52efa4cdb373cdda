"""SAC: its maths against hand-computed values, the squashed log density against the density by
its definition, the learned temperature, acting and the contract the loop relies on."""
import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from agents.base import tracked
from agents import losses
from agents.sac import SAC
from buffers.types import Batch
from hand_nets import (adam_first_step, assert_first_adam_step, builder, flat, forward, numeric_gradient, q_value, random_weights, tf_batch,
                       weights_of)
from helpers import compiled, one, random_batch
from networks.mlp import mlp

OBS, ACT = 3, 2
LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
net = functools.partial(mlp, hidden=[16, 16])


def make(seed=0, **kwargs):
    import keras

    keras.utils.set_random_seed(seed)
    return SAC(OBS, LOW, HIGH, net, np.random.default_rng(seed), **kwargs)


def batch(rng, n=32):
    return random_batch(rng, OBS, LOW, HIGH, n)


def normal_logpdf(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)


def test_squashed_log_density_is_the_density_of_tanh_of_a_gaussian():
    """log p(a) for a = tanh(u), u ~ N(m, s): the Gaussian's log density at u minus log tanh'(u), with
    tanh' taken by a central difference; summed over dimensions. Far out (|u| = 12, where tanh
    rounds to 1 in float32) it stays finite."""
    mean = np.array([[0.3, -1.2], [2.0, 0.0]], np.float64)
    log_std = np.array([[-0.5, 0.4], [0.1, -2.0]], np.float64)
    noise = np.array([[0.7, -0.2], [1.5, 0.3]], np.float64)
    args = [tf.constant(x, tf.float32) for x in (mean, log_std, noise)]
    u = mean + np.exp(log_std) * noise
    h = 1e-5
    dtanh = (np.tanh(u + h) - np.tanh(u - h)) / (2 * h)
    gaussian = normal_logpdf(u, mean, np.exp(log_std))
    a, exact = losses.squashed_gaussian(*args, epsilon=0.0)
    np.testing.assert_allclose(a.numpy(), np.tanh(u), rtol=1e-6)
    np.testing.assert_allclose(exact.numpy(), (gaussian - np.log(dtanh)).sum(-1), rtol=1e-5, atol=1e-5)
    _, reference = losses.squashed_gaussian(*args)  # the default: SB3's log(1 - a^2 + 1e-6)
    np.testing.assert_allclose(reference.numpy(), (gaussian - np.log(1 - np.tanh(u) ** 2 + 1e-6)).sum(-1), rtol=1e-5)
    assert not np.allclose(reference.numpy(), exact.numpy(), rtol=1e-5, atol=1e-5)  # u = 3.66 sits near the edge
    _, far = losses.squashed_gaussian(tf.constant([[12.0]]), tf.constant([[0.0]]), tf.constant([[0.0]]), epsilon=0.0)
    assert np.isfinite(far.numpy()).all() and far.numpy()[0] > 10  # log density near the edge: large, finite


@pytest.mark.parametrize("epsilon,pull", [(1e-6, 0.0), (0.0, 2.0)])
def test_a_saturated_action_is_pulled_back_only_by_the_exact_tanh_correction(epsilon, pull):
    """d log pi / d mean at u = 12, where tanh(u) is 1 in float32: the exact correction's gradient
    is 2 tanh(u) = 2 (the entropy term pulls u back towards 0 whatever Q says, since Q's own pull
    through tanh vanishes there); SB3's log(1 - a^2 + 1e-6) has none, so a bang-bang policy can
    stay at the box's edge. Its value there is capped at -log(1e-6) = 13.8."""
    mean = tf.Variable([[12.0]])
    with tf.GradientTape() as tape:
        _, logp = losses.squashed_gaussian(mean, tf.constant([[0.0]]), tf.constant([[0.0]]), epsilon=epsilon)
    assert float(tape.gradient(logp, mean)[0, 0]) == pytest.approx(pull, abs=1e-3)  # 2 sech(12)^2 / 1e-6 = 3e-4
    if epsilon:
        assert float(logp[0]) == pytest.approx(-0.5 * np.log(2 * np.pi) - np.log(4 * np.exp(-24) + 1e-6), rel=1e-6)


@pytest.mark.parametrize("tanh_epsilon", [1e-6, 0.0])
def test_the_agents_policy_sample_takes_its_tanh_epsilon(tanh_epsilon):
    """agent.tanh_epsilon reaches the sample the updates differentiate: log pi of SAC's sample is
    the squashed density with that epsilon, from the actor's outputs and the draw replayed from a
    copy of its generator; pushed to the edge (|mean| = 9), the two forms differ there."""
    agent = make(tanh_epsilon=tanh_epsilon)
    for layer in agent.actor.layers[-1:]:
        layer.bias.assign(np.array([9.0, -9.0, 0.0, 0.0], np.float32))  # means far out, log std 0
    obs = tf.constant(np.random.default_rng(3).normal(size=(16, OBS)).astype(np.float32))
    copy = tf.random.Generator.from_state(agent._tf_rng.state.numpy(), agent._tf_rng.algorithm)
    mean, raw = tf.split(agent.actor(obs), 2, axis=-1)
    noise = copy.normal(tf.shape(mean))
    _, logp = agent.sample(obs)
    for epsilon in (1e-6, 0.0):
        _, expected = losses.squashed_gaussian(mean, agent.log_std(raw), noise, epsilon)
        assert np.allclose(logp.numpy(), expected.numpy(), rtol=1e-5) is (epsilon == tanh_epsilon)


def test_log_std_maps_are_cleanrls_bound_and_sb3s_clamp():
    raw = tf.constant([-100.0, 0.0, 0.5, 100.0])
    np.testing.assert_allclose(losses.bounded_log_std(raw).numpy(), [-5.0, -1.5, -1.5 + 3.5 * np.tanh(0.5), 2.0], atol=1e-6)
    np.testing.assert_allclose(losses.clipped_log_std(raw).numpy(), [-20.0, 0.0, 0.5, 2.0], atol=0)


def test_soft_value_actor_and_temperature_losses_by_hand():
    next_q, next_logp = np.array([1.0, -2.0], np.float32), np.array([0.5, -1.0], np.float32)
    np.testing.assert_allclose(losses.soft_value(tf.constant(next_q), 0.2, tf.constant(next_logp)).numpy(), [0.9, -1.8], rtol=1e-6)
    logp, q = np.array([-1.0, 0.5, 2.0], np.float32), np.array([3.0, -1.0, 0.0], np.float32)
    assert float(losses.sac_actor_loss(0.5, logp, q)) == pytest.approx(np.mean(0.5 * logp - q), rel=1e-6)
    log_alpha = tf.Variable(math.log(0.3))
    with tf.GradientTape() as tape:
        loss = losses.temperature_loss(log_alpha, tf.constant(logp), -2.0)
    assert float(loss) == pytest.approx(-math.log(0.3) * np.mean(logp - 2.0), rel=1e-5)
    # the gradient moves log alpha only: d/dlog_alpha = -mean(log pi + target_entropy)
    assert float(tape.gradient(loss, log_alpha)) == pytest.approx(-np.mean(logp - 2.0), rel=1e-5)


def test_first_update_by_hand():
    """The critic target with its entropy term, the temperature's step and the targets' Polyak
    move, recomputed from the networks' weights before the update and the update's own noise."""
    agent = make(init_alpha=0.5, tau=0.1, log_std="tanh")  # the hand sample below maps the log std by tanh
    rng = np.random.default_rng(1)
    b = batch(rng)
    # the two samples the update draws, in its order: pi(.|s) first, then pi(.|s'); same generator state
    probe = tf.random.Generator.from_state(agent._tf_rng.state.numpy(), agent._tf_rng.algorithm)
    noise_obs = probe.normal([32, ACT]).numpy()
    noise_next = probe.normal([32, ACT]).numpy()
    w = {k: [x.copy() for x in getattr(agent, k).get_weights()] for k in ("actor", "critic1_target", "critic2_target", "critic1")}

    def forward(ws, x):
        for i in range(0, len(ws) - 2, 2):
            x = np.maximum(x @ ws[i] + ws[i + 1], 0)
        return x @ ws[-2] + ws[-1]

    def sample(obs, noise):
        out = forward(w["actor"], obs)
        mean, raw = out[:, :ACT], out[:, ACT:]
        log_std = -5 + 3.5 * (np.tanh(raw) + 1)
        u = mean + np.exp(log_std) * noise
        logp = (normal_logpdf(u, mean, np.exp(log_std)) - np.log(1 - np.tanh(u) ** 2)).sum(-1)
        return np.tanh(u) * (HIGH - LOW) / 2 + (HIGH + LOW) / 2, logp

    _, logp = sample(b.obs, noise_obs)
    next_a, next_logp = sample(b.next_obs, noise_next)
    q_next = np.minimum(*(forward(w[c], np.concatenate([b.next_obs, next_a], 1))[:, 0] for c in ("critic1_target", "critic2_target")))
    y = b.reward + b.discount * (q_next - 0.5 * next_logp)
    q1 = forward(w["critic1"], np.concatenate([b.obs, b.action], 1))[:, 0]

    m = agent.update(Batch(*(tf.constant(x) for x in b)))
    assert float(m["alpha"]) == pytest.approx(0.5, rel=1e-6)  # the temperature before its own step
    assert float(m["target_q"]) == pytest.approx(float(np.mean(y)), rel=1e-4, abs=1e-4)
    assert float(m["q1"]) == pytest.approx(float(np.mean(q1)), rel=1e-4, abs=1e-5)
    assert float(m["entropy"]) == pytest.approx(float(-np.mean(logp)), rel=1e-4, abs=1e-4)
    # Adam's first step moves log alpha by lr against the sign of its gradient -mean(log pi - |A|)
    step = -3e-4 * np.sign(-np.mean(logp + agent.target_entropy))
    assert float(agent.log_alpha.numpy()) == pytest.approx(math.log(0.5) + step, abs=1e-6)
    for online, target, before in ((agent.critic1, agent.critic1_target, w["critic1_target"]),
                                   (agent.critic2, agent.critic2_target, w["critic2_target"])):
        for o, t, t0 in zip(online.get_weights(), target.get_weights(), before, strict=True):
            np.testing.assert_allclose(t, t0 + 0.1 * (o - t0), rtol=1e-5, atol=1e-6, err_msg=target.name)


# --- one update's steps by value, every network with weights of its own --------------------------

NETS = ("actor", "critic1", "critic2", "critic1_target", "critic2_target")
HAND_LR = dict(actor_lr=0.01, critic_lr=0.2, alpha_lr=0.2)
NP_LOG_STD = {"tanh": lambda raw: -5.0 + 3.5 * (np.tanh(raw) + 1.0), "clip": lambda raw: np.clip(raw, -20.0, 2.0)}


def hand_sample(actor_w, obs, noise, log_std):
    """a = tanh(mean + std * noise) onto the box and log pi(a|s) of the squashed action, in float64;
    log(1 - tanh(u)^2) written as 2 (log 2 - |u| - log(1 + exp(-2|u|)))."""
    out = forward(actor_w, obs)
    mean, ls = out[:, :ACT], NP_LOG_STD[log_std](out[:, ACT:])
    u = mean + np.exp(ls) * noise
    log_det = 2.0 * (np.log(2.0) - np.abs(u) - np.log1p(np.exp(-2.0 * np.abs(u))))
    logp = (normal_logpdf(u, mean, np.exp(ls)) - log_det).sum(-1)
    return LOW + (np.tanh(u) + 1.0) * (HIGH - LOW) / 2, logp


@pytest.mark.parametrize("log_std", sorted(losses.LOG_STD_MAPS))
def test_actor_critic_and_temperature_steps_by_hand(log_std):
    """One update from chosen weights (the targets differ from the critics), recomputed in numpy
    from the weights before it and its own noise, replayed from a copy of the generator (the
    sample of pi(.|s) drawn first, then pi(.|s')):
    - the temperature: alpha in the losses is the value before its step; log alpha takes Adam's
      first step against the sign of -mean(log pi + target_entropy);
    - the critics: half the sum of their IS-weighted squared errors, and Adam's first step on its
      gradient (central differences);
    - the actor: actor_loss = mean(alpha * log pi - min(Q1, Q2)) on the critics AFTER their step
      with the sample drawn before it, and each weight moves by Adam's first step, -lr * sign(g),
      g that loss's gradient by central differences; the critics before their step, or the loss's
      sign flipped, give another step;
    - both target critics: Polyak by tau towards their critic after its step."""
    init_alpha, tau, n = 0.2, 0.1, 8
    agent = SAC(OBS, LOW, HIGH, builder([8]), np.random.default_rng(0), init_alpha=init_alpha, tau=tau,
                log_std=log_std, **HAND_LR)
    rng = np.random.default_rng(1)
    for name in NETS:
        model = getattr(agent, name)
        model.set_weights(random_weights(model, rng))
    b = {"obs": rng.normal(size=(n, OBS)), "action": rng.uniform(LOW, HIGH, size=(n, ACT)),
         "reward": rng.normal(size=n), "next_obs": rng.normal(size=(n, OBS)),
         "discount": np.where(np.arange(n) % 4 == 3, 0.0, 0.99),  # some terminal transitions
         "weight": rng.uniform(0.5, 1.5, size=n)}  # importance weights scale each sample's squared error
    b = {k: v.astype(np.float32) for k, v in b.items()}
    w0 = dict(zip(NETS, weights_of(*(getattr(agent, k) for k in NETS))))
    probe = tf.random.Generator.from_state(agent._tf_rng.state.numpy(), agent._tf_rng.algorithm)
    noise_obs, noise_next = probe.normal([n, ACT]).numpy(), probe.normal([n, ACT]).numpy()

    m = {k: np.asarray(v) for k, v in agent.update(tf_batch(**b)).items()}
    w1 = dict(zip(NETS, weights_of(*(getattr(agent, k) for k in NETS))))

    # the temperature
    _, logp = hand_sample(w0["actor"], b["obs"], noise_obs, log_std)
    te = agent.target_entropy
    assert float(m["alpha"]) == pytest.approx(init_alpha, rel=1e-6)
    assert float(m["alpha_loss"]) == pytest.approx(-math.log(init_alpha) * np.mean(logp + te), rel=1e-4, abs=1e-5)
    assert float(m["entropy"]) == pytest.approx(-np.mean(logp), rel=1e-4, abs=1e-5)
    alpha_step = adam_first_step([np.array(-np.mean(logp + te))], HAND_LR["alpha_lr"])[0]
    assert abs(alpha_step) == pytest.approx(HAND_LR["alpha_lr"], rel=1e-4)
    # (Keras' float32 beta_2 makes its first step 6e-6 shorter in relative terms: tolerances allow for it)
    assert float(agent.log_alpha.numpy()) == pytest.approx(math.log(init_alpha) + alpha_step, abs=1e-5)

    # the critics
    next_a, next_logp = hand_sample(w0["actor"], b["next_obs"], noise_next, log_std)
    next_q = np.minimum(q_value(w0["critic1_target"], b["next_obs"], next_a),
                        q_value(w0["critic2_target"], b["next_obs"], next_a))
    y = b["reward"] + b["discount"] * (next_q - init_alpha * next_logp)

    def critic_loss(ws):
        c1, c2 = ws[:len(w0["critic1"])], ws[len(w0["critic1"]):]
        return 0.5 * sum(np.mean(b["weight"] * (q_value(c, b["obs"], b["action"]) - y) ** 2) for c in (c1, c2))

    critics0 = w0["critic1"] + w0["critic2"]
    np.testing.assert_allclose(m["target_q"], np.mean(y), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["critic_loss"], critic_loss(critics0), rtol=1e-4, atol=1e-5)
    g_critic = flat(numeric_gradient(critic_loss, critics0))
    critic_step = flat(w1["critic1"] + w1["critic2"]) - flat(critics0)
    clear = np.abs(g_critic) > 1e-4
    assert clear.mean() > 0.5
    np.testing.assert_allclose(critic_step[clear], flat(adam_first_step([g_critic], HAND_LR["critic_lr"]))[clear],
                               rtol=1e-3, atol=1e-6, err_msg="the critics' step")

    # the actor, on the critics after their step
    def actor_loss(actor_w, c1, c2, alpha):
        a, lp = hand_sample(actor_w, b["obs"], noise_obs, log_std)
        return np.mean(alpha * lp - np.minimum(q_value(c1, b["obs"], a), q_value(c2, b["obs"], a)))

    after, before = (w1["critic1"], w1["critic2"]), (w0["critic1"], w0["critic2"])
    loss = actor_loss(w0["actor"], *after, init_alpha)
    assert abs(loss - actor_loss(w0["actor"], *before, init_alpha)) > 0.05  # the critics' step shows in the loss
    g = flat(numeric_gradient(lambda w: actor_loss(w, *after, init_alpha), w0["actor"]))
    g_before = flat(numeric_gradient(lambda w: actor_loss(w, *before, init_alpha), w0["actor"]))
    step = flat(w1["actor"]) - flat(w0["actor"])
    assert_first_adam_step(step, g, g_before, HAND_LR["actor_lr"], "the actor on the critics before their step")
    np.testing.assert_allclose(m["actor_loss"], loss, rtol=1e-4, atol=1e-5, err_msg="actor_loss on the stepped critics")

    # both target critics: Polyak by tau towards the stepped critics
    for k in (1, 2):
        for t1, t0, o1 in zip(w1[f"critic{k}_target"], w0[f"critic{k}_target"], w1[f"critic{k}"], strict=True):
            np.testing.assert_allclose(t1, t0 + tau * (o1.astype(np.float64) - t0), rtol=1e-5, atol=1e-6,
                                       err_msg=f"critic{k}_target")


def test_target_entropy_auto_and_bad_values():
    assert make().target_entropy == -2.0
    assert make(target_entropy=-0.5).target_entropy == -0.5
    for bad in ("high", float("nan"), True):
        with pytest.raises(ValueError, match="target_entropy must be a number or auto"):
            make(target_entropy=bad)
    with pytest.raises(ValueError, match="init_alpha must be a positive number"):
        make(init_alpha=0.0)


@pytest.mark.parametrize("log_std", ["tanh", "clip"])
def test_acting_is_tanh_of_the_mean_or_of_a_seeded_sample_in_the_box(log_std):
    agent = make(log_std=log_std)
    obs = np.random.default_rng(2).normal(size=(2000, OBS)).astype(np.float32)
    out = agent.actor(obs).numpy()
    greedy = agent.act(obs, explore=False)
    np.testing.assert_allclose(greedy, np.tanh(out[:, :ACT]) * (HIGH - LOW) / 2 + (HIGH + LOW) / 2, rtol=1e-5, atol=1e-6)
    noisy = agent.act(obs, explore=True)
    assert noisy.shape == (2000, ACT) and np.all(noisy >= LOW) and np.all(noisy <= HIGH)
    # the pre-squash spread is the policy's std: atanh of the rescaled action, minus the mean
    u = np.arctanh(np.clip((noisy - (HIGH + LOW) / 2) / ((HIGH - LOW) / 2), -0.999999, 0.999999))
    raw = out[:, ACT:]
    std = np.exp(-5 + 3.5 * (np.tanh(raw) + 1) if log_std == "tanh" else np.clip(raw, -20, 2))
    z = (u - out[:, :ACT]) / std
    assert abs(z.mean()) < 0.1 and abs(z.std() - 1) < 0.1
    np.testing.assert_array_equal(make(seed=3, log_std=log_std).act(obs, True),
                                  make(seed=3, log_std=log_std).act(obs, True))  # the run's generator


def test_compiled_update_is_traced_once_and_acting_follows_it():
    learner = compiled(make())
    rng = np.random.default_rng(4)
    for n in (32, 32, 17):
        metrics = learner.update(one(batch(rng, n)))
    assert learner.update_trace_count == 1 and int(learner.agent.updates.numpy()) == 3
    assert metrics["td_error"].shape == (17,)
    obs = rng.normal(size=(5, OBS)).astype(np.float32)
    expected = np.tanh(learner.agent.actor(obs).numpy()[:, :ACT]) * (HIGH - LOW) / 2 + (HIGH + LOW) / 2
    np.testing.assert_allclose(learner.act(obs, False), expected, rtol=1e-5, atol=1e-6)


def test_checkpoint_holds_the_temperature_and_its_optimizer(tmp_path):
    agent = make(init_alpha=0.3)
    compiled(agent).update(one(batch(np.random.default_rng(5))))
    path = tf.train.Checkpoint(**tracked(agent)).write(str(tmp_path / "c"))
    other = make(seed=9)
    tf.train.Checkpoint(**tracked(other)).read(path).assert_consumed()
    assert float(other.log_alpha.numpy()) == float(agent.log_alpha.numpy())
    assert int(other.alpha_optimizer.iterations.numpy()) == 1
