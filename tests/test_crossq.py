"""CrossQ: Batch Renormalization against a numpy reference (training and inference mode, the warm-up,
the r/d clipping, the running statistics, where the gradient flows), the joint forward pass, the
delayed actor and temperature, acting, the networks CrossQ refuses, and the contract the loop
relies on."""
import functools
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from agents.base import tracked
from agents import losses
from agents.crossq import CrossQ, crossq_critic_loss
from agents.losses import clipped_log_std
from hand_nets import adam_first_step, assert_first_adam_step, flat, numeric_gradient
from helpers import compiled, one, random_batch
from networks.batch_renorm import DMAX, RMAX, BatchRenorm
from networks.mlp import mlp
from networks.numpy_forward import forward_fn

OBS, ACT = 3, 2
LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
net = functools.partial(mlp, hidden=[16, 16], batch_renorm=True, renorm_warmup=100_000)


def make(seed=0, network=net, **kwargs):
    import keras

    keras.utils.set_random_seed(seed)
    return CrossQ(OBS, LOW, HIGH, network, np.random.default_rng(seed), **kwargs)


def batch(rng, n=32):
    return random_batch(rng, OBS, LOW, HIGH, n)


# --- Batch Renormalization ---------------------------------------------------------------------

def reference_brn(x, running_mean, running_var, calls, warmup, momentum=0.01, eps=1e-3, scale=1.0, bias=0.0):
    """sb3-contrib's BatchRenorm.forward in training mode, in float64 numpy: (output, new running
    mean, new running var)."""
    mu, var = x.mean(0), x.var(0, ddof=1)
    if calls > warmup:
        running_std = np.sqrt(running_var + eps)
        r = np.clip(np.sqrt(var + eps) / running_std, 1 / RMAX, RMAX)
        d = np.clip((mu - running_mean) / running_std, -DMAX, DMAX)
        m, v = mu - d * np.sqrt(var) / r, var / r ** 2
    else:
        m, v = mu, var
    y = (x - m) / np.sqrt(v + eps) * scale + bias
    return y, running_mean + momentum * (mu - running_mean), running_var + momentum * (var - running_var)


def brn_layer(features, warmup, running_mean, running_var, calls=0.0):
    layer = BatchRenorm(warmup=warmup)
    layer.build((None, features))
    layer.running_mean.assign(running_mean)
    layer.running_var.assign(running_var)
    layer.calls.assign(calls)
    return layer


@pytest.mark.parametrize("calls,warmup", [(0.0, 2), (2.0, 2), (3.0, 2)])
def test_batch_renorm_training_mode_against_numpy(calls, warmup):
    """Plain BatchNorm (unbiased variance) while calls <= warmup, the renorm correction after; the
    running statistics move by the momentum either way and the count goes up by one."""
    rng = np.random.default_rng(0)
    x = rng.normal(1.5, 2.0, size=(64, 4))
    mean0, var0 = np.array([1.0, 2.0, -1.0, 1.4]), np.array([3.0, 0.5, 4.0, 4.2])
    layer = brn_layer(4, warmup, mean0.astype(np.float32), var0.astype(np.float32), calls)
    y = layer(tf.constant(x, tf.float32), training=True).numpy()
    expected, mean1, var1 = reference_brn(x, mean0, var0, calls, warmup)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.running_mean.numpy(), mean1, rtol=1e-5)
    np.testing.assert_allclose(layer.running_var.numpy(), var1, rtol=1e-5)
    assert layer.calls.numpy() == calls + 1
    plain, _, _ = reference_brn(x, mean0, var0, 0, 10)
    assert (np.abs(y - plain).max() > 0.1) == (calls > warmup)  # the correction is there only after the warm-up


def test_batch_renorm_clips_r_and_d():
    """Running statistics far from the batch's: r at rmax and d at -dmax, so the output is
    (x - mu + dmax * sigma / rmax) / sqrt(var / rmax**2 + eps)."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 3.0, size=(128, 2))
    layer = brn_layer(2, 0, np.array([50.0, 50.0], np.float32), np.array([0.01, 0.01], np.float32), calls=1.0)
    y = layer(tf.constant(x, tf.float32), training=True).numpy()
    mu, var = x.mean(0), x.var(0, ddof=1)
    by_hand = (x - (mu + DMAX * np.sqrt(var) / RMAX)) / np.sqrt(var / RMAX ** 2 + 1e-3)
    np.testing.assert_allclose(y, by_hand, rtol=1e-4, atol=1e-4)


def test_batch_renorm_inference_mode_uses_the_running_statistics_and_numpy_agrees():
    rng = np.random.default_rng(2)
    model = mlp(3, 2, hidden=[8], batch_renorm=True, renorm_warmup=1, name="critic")
    for _ in range(4):  # move the running statistics, past the warm-up
        model(tf.constant(rng.normal(2.0, 3.0, size=(32, 3)), tf.float32), training=True)
    brn = model.get_layer("critic_brn0")
    x = rng.normal(size=(5, 3)).astype(np.float32)
    before = [w.numpy().copy() for w in model.weights]
    out = model(x, training=False).numpy()
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(before, model.weights))  # inference moves nothing
    first = (x - brn.running_mean.numpy()) / np.sqrt(brn.running_var.numpy() + 1e-3) * brn.scale.numpy() + brn.bias.numpy()
    np.testing.assert_allclose(brn(x, training=False).numpy(), first, rtol=1e-5)
    assert brn.calls.numpy() == 4.0 and not np.allclose(brn.running_mean.numpy(), 0.0)
    np.testing.assert_allclose(forward_fn(model)(before, x), out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("calls", [0.0, 1.0])
def test_the_gradient_flows_through_the_batch_moments(calls):
    """d sum(c * y) / dx by TensorFlow equals central differences in float64: through the batch mean
    and variance in plain BatchNorm; with r and d clipped (locally constant), the same after the
    warm-up. A stop-gradient on the moments would make them differ."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 2))
    c = rng.normal(size=(6, 2))
    layer = BatchRenorm(warmup=0, epsilon=1e-3, dtype="float64")
    layer.build((None, 2))

    def reset():  # each call moves the running statistics and the count: start every one alike
        layer.running_mean.assign([40.0, -40.0])
        layer.running_var.assign([0.001, 0.001])
        layer.calls.assign(calls)

    def f(v):
        reset()
        return float(tf.reduce_sum(c * layer(tf.constant(v), training=True)))

    xt = tf.constant(x)
    reset()
    with tf.GradientTape() as tape:
        tape.watch(xt)
        loss = tf.reduce_sum(c * layer(xt, training=True))
    grad = tape.gradient(loss, xt).numpy()
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = 1e-6
        numeric[i] = (f(x + e) - f(x - e)) / 2e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)
    assert np.abs(grad).max() > 1e-3


def test_a_feature_constant_over_the_batch_keeps_the_gradient_finite():
    """A ReLU unit dead for every row has var_B = 0; after the warm-up, d * sqrt(var_B) would give
    0 * inf = NaN in the gradient (it did, in a 16-unit critic). Its output is the reference's."""
    x = np.stack([np.random.default_rng(5).normal(size=16), np.zeros(16)], axis=1)
    layer = brn_layer(2, 0, np.array([0.5, 0.0], np.float32), np.array([2.0, 1.0], np.float32), calls=1.0)
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = layer(xt, training=True)
        loss = tf.reduce_sum(y * tf.range(16.0)[:, None])
    grads = tape.gradient(loss, [xt, layer.scale, layer.bias])
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)
    expected, _, _ = reference_brn(x, np.array([0.5, 0.0]), np.array([2.0, 1.0]), 1.0, 0)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_batch_renorm_network_is_never_sharded():
    from networks.sharding import batch_shards

    rng = np.random.default_rng(4)
    x = tf.constant(rng.normal(size=(8, 3)), tf.float32)
    a = mlp(3, 1, hidden=[4], batch_renorm=True, name="critic")
    b = mlp(3, 1, hidden=[4], batch_renorm=True, name="critic")
    b.set_weights(a.get_weights())
    with batch_shards(2):
        sharded = a(x, training=True)
    np.testing.assert_array_equal(sharded.numpy(), b(x, training=True).numpy())
    assert a.batch_dependent and not mlp(3, 1, hidden=[4]).batch_dependent


# --- CrossQ ------------------------------------------------------------------------------------

def test_log_std_clamp_and_critic_loss_by_hand():
    np.testing.assert_array_equal(clipped_log_std(np.array([-30.0, 0.5, 3.0])), [-20.0, 0.5, 2.0])
    np.testing.assert_array_equal(clipped_log_std(tf.constant([-30.0, 0.5, 3.0])).numpy(), [-20.0, 0.5, 2.0])
    q1, q2, y = tf.constant([1.0, 2.0]), tf.constant([0.0, 4.0]), tf.constant([1.0, 1.0])
    assert float(crossq_critic_loss(q1, q2, y)) == pytest.approx(0.5 * ((0 + 1) / 2 + (1 + 9) / 2))


def test_the_joint_forward_pass_normalizes_over_both_batches():
    """After one update each critic's layers took one training call over the 2B rows of the current
    and next pairs: the first layer's running mean over the observation features is
    momentum * the mean of obs and next_obs together."""
    agent = make()
    b = batch(np.random.default_rng(5))
    compiled(agent).update(one(b))
    for critic in (agent.critic1, agent.critic2):
        first = critic.get_layer(f"{critic.name}_brn0")
        assert [critic.get_layer(f"{critic.name}_brn{i}").calls.numpy() for i in range(3)] == [1.0, 1.0, 1.0]
        both = np.concatenate([b.obs, b.next_obs]).mean(0)
        np.testing.assert_allclose(first.running_mean.numpy()[:OBS], 0.01 * both, rtol=1e-5)
        assert not np.allclose(first.running_mean.numpy()[:OBS], 0.01 * b.obs.mean(0), rtol=1e-3)  # not B rows


def test_first_update_by_hand():
    """The first update's critic loss and target from the networks as they were before it: the next
    action drawn with the actor in inference mode (the same draw, replayed from a copy of the
    generator), Q from the joint training-mode pass, the soft target with alpha = 1."""
    agent = make()
    b = batch(np.random.default_rng(6))
    rng_copy = tf.random.Generator.from_state(agent._tf_rng.state.numpy(), agent._tf_rng.algorithm)
    mean, raw = np.split(agent.actor(b.next_obs, training=False).numpy(), 2, axis=-1)
    noise = rng_copy.normal(mean.shape).numpy()
    squashed, log_prob = losses.squashed_gaussian(mean, clipped_log_std(raw), noise)
    next_action = losses.scale_action(squashed, LOW, HIGH).numpy()

    def joint(critic):
        x = np.concatenate([np.concatenate([b.obs, b.action], 1), np.concatenate([b.next_obs, next_action], 1)])
        probe = mlp(OBS + ACT, 1, hidden=[16, 16], batch_renorm=True, name=critic.name)
        probe.set_weights(critic.get_weights())
        q = probe(x, training=True).numpy()[:, 0]
        return q[:32], q[32:]

    (q1, n1), (q2, n2) = joint(agent.critic1), joint(agent.critic2)
    target = b.reward + b.discount * (np.minimum(n1, n2) - 1.0 * log_prob.numpy())
    loss = 0.5 * (np.mean((q1 - target) ** 2) + np.mean((q2 - target) ** 2))
    metrics = agent.update(b)
    assert float(metrics["critic_loss"]) == pytest.approx(loss, rel=1e-4)
    assert float(metrics["target_q"]) == pytest.approx(target.mean(), rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(metrics["td_error"].numpy(), np.maximum(abs(target - q1), abs(target - q2)), rtol=1e-4,
                               atol=1e-4)


# --- the delayed step by value ------------------------------------------------------------------

HAND_LR = dict(actor_lr=0.01, critic_lr=0.05, alpha_lr=0.2)


def values_of(*models) -> dict:
    """Every variable of the models, by its path, as float64."""
    return {v.path: np.array(v.numpy(), np.float64) for m in models for v in m.weights}


def np_forward(model, values, x, training):
    """A Batch Renorm mlp's output in float64 numpy, its variables' values looked up by path in
    `values`: a BatchRenorm layer in training mode normalizes by the batch's moments (`reference_brn`:
    plain BatchNorm until its count passes the warm-up, the renorm correction after), in inference
    mode by the running statistics; Dense layers with their relu or linear activation."""
    h = np.asarray(x, np.float64)
    for layer in model.layers:
        if isinstance(layer, BatchRenorm):
            scale, bias, mean, var, calls = (values[v.path] for v in (layer.scale, layer.bias, layer.running_mean,
                                                                       layer.running_var, layer.calls))
            if training:
                h, _, _ = reference_brn(h, mean, var, float(calls), layer.warmup, layer.momentum, layer.epsilon,
                                        scale, bias)
            else:
                h = (h - mean) / np.sqrt(var + layer.epsilon) * scale + bias
        elif isinstance(layer, keras.layers.Dense):
            h = h @ values[layer.kernel.path] + values[layer.bias.path]
            activation = layer.activation.__name__
            assert activation in ("relu", "linear"), activation
            h = np.maximum(h, 0.0) if activation == "relu" else h
    return h


def randomize(model, rng):
    """Weights of its own for every variable but the counts: kernels and biases N(0, 0.5), Batch
    Renorm scales U(0.5, 1.5), running means N(0, 0.5) and variances U(0.5, 2), so that inference
    mode (the running statistics) and training mode (the batch's) differ."""
    for v in model.weights:
        name = v.path.split("/")[-1]
        if name == "calls":
            continue
        shape = tuple(v.shape)
        value = {"running_var": rng.uniform(0.5, 2.0, shape), "scale": rng.uniform(0.5, 1.5, shape)}.get(
            name, rng.normal(0.0, 0.5, shape))
        v.assign(value.astype(np.float32))


def hand_policy_sample(actor, values, obs, noise, training):
    """a = tanh(mean + std * noise) onto the box and log pi(a|s), float64; log std clamped to [-20, 2],
    the tanh correction sb3-contrib's log(1 - a^2 + 1e-6)."""
    out = np_forward(actor, values, obs, training)
    mean, log_std = out[:, :ACT], np.clip(out[:, ACT:], -20.0, 2.0)
    u = mean + np.exp(log_std) * noise
    log_det = np.log(1.0 - np.tanh(u) ** 2 + 1e-6)
    logp = (-0.5 * noise**2 - log_std - 0.5 * np.log(2 * np.pi) - log_det).sum(-1)
    return LOW + (np.tanh(u) + 1.0) * (HIGH - LOW) / 2, logp


def test_the_delayed_actor_and_temperature_steps_by_hand():
    """policy_delay 2: update 1 leaves the actor and the temperature alone; update 2, recomputed in
    numpy from the weights before it and its noise (replayed: the next action's draw, then the
    actor's sample):
    - the actor's sample in training mode (the batch's moments in its Batch Renorm);
    - the temperature: log alpha takes Adam's first step against -mean(log pi + target_entropy);
    - the actor: actor_loss = mean(alpha * log pi - min(Q1, Q2)(s, a)) with alpha from before the
      update and the critics after their step in inference mode (their running statistics); each
      actor weight (Batch Renorm scales and biases too) moves by Adam's first step, -lr * sign(g),
      g that loss's gradient by central differences. The critics in training mode, or the sign
      flipped, give another step."""
    init_alpha, n = 0.3, 8
    network = functools.partial(mlp, hidden=[8], batch_renorm=True, renorm_warmup=100_000)
    agent = make(network=network, policy_delay=2, init_alpha=init_alpha, **HAND_LR)
    rng = np.random.default_rng(10)
    for model in (agent.actor, agent.critic1, agent.critic2):
        randomize(model, rng)
    actor0 = values_of(agent.actor)
    agent.update(batch(rng, n))
    # update 1: the critics only (the next action drawn in inference mode)
    assert all(np.array_equal(v, actor0[k]) for k, v in values_of(agent.actor).items())
    assert float(agent.log_alpha.numpy()) == pytest.approx(math.log(init_alpha), abs=1e-7)

    b = batch(rng, n)
    probe = tf.random.Generator.from_state(agent._tf_rng.state.numpy(), agent._tf_rng.algorithm)
    probe.normal([n, ACT])  # the next action's draw
    noise = probe.normal([n, ACT]).numpy()
    m = {k: np.asarray(v) for k, v in agent.update(b).items()}
    actor1, critics1 = values_of(agent.actor), values_of(agent.critic1, agent.critic2)

    # the temperature
    _, logp = hand_policy_sample(agent.actor, actor0, b.obs, noise, training=True)
    te = agent.target_entropy
    assert float(m["alpha"]) == pytest.approx(init_alpha, rel=1e-6)
    assert float(m["alpha_loss"]) == pytest.approx(-math.log(init_alpha) * np.mean(logp + te), rel=1e-4, abs=1e-5)
    assert float(m["entropy"]) == pytest.approx(-np.mean(logp), rel=1e-4, abs=1e-5)
    alpha_step = adam_first_step([np.array(-np.mean(logp + te))], HAND_LR["alpha_lr"])[0]
    assert float(agent.log_alpha.numpy()) == pytest.approx(math.log(init_alpha) + alpha_step, abs=1e-5)

    # the actor
    paths = [v.path for v in agent.actor.trainable_variables]

    def actor_loss(trainable, critics_training=False):
        values = {**actor0, **dict(zip(paths, trainable))}
        a, lp = hand_policy_sample(agent.actor, values, b.obs, noise, training=True)
        sa = np.concatenate([b.obs, a], 1)
        q = np.minimum(*(np_forward(c, critics1, sa, critics_training)[:, 0] for c in (agent.critic1, agent.critic2)))
        return np.mean(init_alpha * lp - q)

    theta0 = [actor0[p] for p in paths]
    g = flat(numeric_gradient(actor_loss, theta0))
    g_training = flat(numeric_gradient(lambda t: actor_loss(t, critics_training=True), theta0))
    step = flat([actor1[p] for p in paths]) - flat(theta0)
    assert_first_adam_step(step, g, g_training, HAND_LR["actor_lr"], "the actor on the critics in training mode")
    np.testing.assert_allclose(m["actor_loss"], actor_loss(theta0), rtol=1e-4, atol=1e-5,
                               err_msg="actor_loss on the critics in inference mode")


def test_past_the_renorm_warmup_the_update_renormalizes_by_hand():
    """renorm_warmup=2 (network.renorm_warmup), policy_delay=1: updates 1-3 are plain BatchNorm;
    update 4 (every layer's count at 3 > 2) is recomputed in numpy from the networks before it and
    its noise: the next action in inference mode, the critics' joint training-mode pass
    with the renorm correction, the soft target, the critics' loss and td_error, and the actor's
    training-mode sample (the temperature's metrics), also renormalized. The observations sit far
    from the running statistics (around 6, std 0.2, as an unnormalized feature can), so that the
    correction is clipped at both bounds (r = 1/rmax, d = dmax on the input layer), and plain
    BatchNorm would give other values. Updates 5-8 stay finite."""
    n, warmup = 8, 2
    network = functools.partial(mlp, hidden=[8], batch_renorm=True, renorm_warmup=warmup)
    agent = make(network=network, policy_delay=1)
    rng = np.random.default_rng(12)

    def shifted_batch():
        b = batch(rng, n)
        return b._replace(obs=(6.0 + 0.2 * b.obs).astype(np.float32),
                          next_obs=(6.0 + 0.2 * b.next_obs).astype(np.float32))

    for _ in range(3):
        agent.update(shifted_batch())
    models = (agent.actor, agent.critic1, agent.critic2)
    brns = [layer for m in models for layer in m.layers if isinstance(layer, BatchRenorm)]
    assert [(layer.warmup, float(layer.calls.numpy())) for layer in brns] == [(warmup, 3.0)] * len(brns)  # past it
    assert (RMAX, DMAX) == (3.0, 5.0)  # sb3-contrib's bounds, which the numpy reference takes from the module

    b = shifted_batch()
    v = values_of(*models)
    alpha = math.exp(float(agent.log_alpha.numpy()))
    probe = tf.random.Generator.from_state(agent._tf_rng.state.numpy(), agent._tf_rng.algorithm)
    noise_next, noise_pi = probe.normal([n, ACT]).numpy(), probe.normal([n, ACT]).numpy()
    m = {k: np.asarray(x) for k, x in agent.update(b).items()}

    def hand(values):
        next_a, next_logp = hand_policy_sample(agent.actor, values, b.next_obs, noise_next, training=False)
        joint = np.concatenate([np.concatenate([b.obs, b.action], 1), np.concatenate([b.next_obs, next_a], 1)])
        (q1, n1), (q2, n2) = (np.split(np_forward(c, values, joint, True)[:, 0], 2) for c in models[1:])
        y = b.reward + b.discount * (np.minimum(n1, n2) - alpha * next_logp)
        loss = 0.5 * (np.mean((q1 - y) ** 2) + np.mean((q2 - y) ** 2))
        _, logp = hand_policy_sample(agent.actor, values, b.obs, noise_pi, training=True)
        return {"critic_loss": loss, "target_q": y.mean(), "td_error": np.maximum(abs(y - q1), abs(y - q2)),
                "entropy": -logp.mean()}

    expected = hand(v)
    plain = hand({k: (np.zeros_like(x) if k.endswith("calls") else x) for k, x in v.items()})  # counts at 0: no renorm
    for key in ("critic_loss", "target_q", "td_error", "entropy"):
        assert np.max(np.abs(np.asarray(plain[key]) - expected[key])) > 0.05, key  # renorm changes every value
        np.testing.assert_allclose(m[key], expected[key], rtol=1e-4, atol=1e-4,
                                   err_msg=f"{key} with the renorm correction")
    # the correction is clipped at both bounds on the critics' input layer
    for critic in models[1:]:
        layer = critic.get_layer(f"{critic.name}_brn0")
        x = np.concatenate([b.obs, b.next_obs])  # the observation features of the joint pass
        running_std = np.sqrt(v[layer.running_var.path][:OBS] + layer.epsilon)
        r = np.sqrt(x.var(0, ddof=1) + layer.epsilon) / running_std
        d = (x.mean(0) - v[layer.running_mean.path][:OBS]) / running_std
        assert np.all(r < 1 / RMAX) and np.all(d > DMAX), (r, d)

    for _ in range(4):
        m = agent.update(shifted_batch())
        assert all(np.all(np.isfinite(np.asarray(x))) for x in m.values())
    assert all(np.all(np.isfinite(w.numpy())) for model in models for w in model.weights)
    assert float(agent.critic1.get_layer("critic1_brn1").calls.numpy()) == 8.0


def test_the_actor_and_the_temperature_step_on_every_third_update():
    learner = compiled(make())
    agent = learner.agent
    rng = np.random.default_rng(7)
    actor0, alpha0 = [w.numpy().copy() for w in agent.actor.trainable_weights], float(agent.log_alpha.numpy())
    critic0 = [w.numpy().copy() for w in agent.critic1.trainable_weights]
    for n in range(1, 4):
        learner.update(one(batch(rng)))
        moved = not all(np.array_equal(a, w.numpy()) for a, w in zip(actor0, agent.actor.trainable_weights))
        assert moved == (n == 3) and (float(agent.log_alpha.numpy()) != alpha0) == (n == 3)
    assert not all(np.array_equal(a, w.numpy()) for a, w in zip(critic0, agent.critic1.trainable_weights))
    # the actor's layers took one training call (its own update); the next actions were drawn in inference mode
    assert agent.actor.get_layer("actor_brn0").calls.numpy() == 1.0
    assert agent.critic1.get_layer("critic1_brn0").calls.numpy() == 3.0
    assert learner.update_trace_count == 1 and int(agent.updates.numpy()) == 3
    assert float(agent.actor_optimizer.beta_1) == 0.5 and float(agent.alpha_optimizer.beta_1) == 0.9


def test_acting_is_tanh_of_the_mean_in_inference_mode():
    learner = compiled(make())
    rng = np.random.default_rng(8)
    for _ in range(3):
        learner.update(one(batch(rng)))
    obs = rng.normal(size=(5, OBS)).astype(np.float32)
    mean = learner.agent.actor(obs, training=False).numpy()[:, :ACT]
    np.testing.assert_allclose(learner.act(obs, False), np.tanh(mean) * (HIGH - LOW) / 2 + (HIGH + LOW) / 2,
                               rtol=1e-5, atol=1e-6)
    assert learner.agent.acting.in_numpy
    np.testing.assert_array_equal(make(seed=3).act(obs, True), make(seed=3).act(obs, True))


def test_crossq_refuses_networks_without_batch_renorm_and_bad_settings():
    with pytest.raises(ValueError, match="needs Batch Renormalization"):
        make(network=functools.partial(mlp, hidden=[8]))
    with pytest.raises(ValueError, match="policy_delay must be an integer >= 1"):
        make(policy_delay=0)
    with pytest.raises(ValueError, match="beta_1 must be in"):
        make(beta_1=1.0)
    with pytest.raises(ValueError, match="renorm_momentum"):
        mlp(3, 1, batch_renorm=True, renorm_momentum=0.0)


def test_checkpoint_holds_the_running_statistics_and_counts(tmp_path):
    learner = compiled(make())
    rng = np.random.default_rng(9)
    for _ in range(3):
        learner.update(one(batch(rng)))
    agent = learner.agent
    path = tf.train.Checkpoint(**tracked(agent)).write(str(tmp_path / "c"))
    other = make(seed=11)
    tf.train.Checkpoint(**tracked(other)).read(path).assert_consumed()
    for a, b in zip(agent.critic2.weights + agent.actor.weights, other.critic2.weights + other.actor.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)
    assert other.critic2.get_layer("critic2_brn1").calls.numpy() == 3.0


# --- through train.py and evaluate.py ----------------------------------------------------------

def _train(run_dir, *overrides):
    import subprocess
    import sys

    from helpers import ROOT

    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "agent=crossq", "env=pendulum",
           "network.hidden=[16,16]", "network.actor_hidden=[16,16]", "network.renorm_warmup=300", "learning_starts=200",
           "eval_every=200", "eval_episodes=1", "batch_size=32", "deterministic=true", "logger.progress=false",
           "checkpoint.every=0", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_resume_is_bit_exact_across_the_renorm_warmup(tmp_path):
    """A run extended from its checkpoint at 400 steps (200 updates: plain BatchNorm) ends where the
    uninterrupted 700-step run does (the renorm correction on from the 301st critic update): the
    same networks, running statistics, counts and optimizer state."""
    import json

    from helpers import final_weights, resume

    whole, extended = tmp_path / "whole", tmp_path / "extended"
    for run_dir, steps in ((whole, 700), (extended, 400)):
        proc = _train(run_dir, f"total_steps={steps}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = resume(extended, "total_steps=700")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = final_weights(whole), final_weights(extended)
    counts = [k for k in a if "calls" in k]
    assert counts and all(float(a[k]) in (500.0, 166.0) for k in counts), {k: a[k] for k in counts}
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert json.loads((whole / "summary.json").read_text())["final_return"] == \
        json.loads((extended / "summary.json").read_text())["final_return"]


def test_evaluate_and_export_act_in_inference_mode(tmp_path):
    import json

    from helpers import evaluate

    run = tmp_path / "run"
    proc = _train(run, "total_steps=400")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = evaluate(f"run_dir={run}", "episodes=2", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((run / "eval" / "latest.json").read_text())
    assert result["episodes"] == 2 and np.isfinite(result["return_mean"])
    exported = tf.saved_model.load(str(run / "export" / "latest"))
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    action = exported(obs).numpy()
    assert action.shape == (4, 1) and np.all(np.abs(action) <= 2.0)
    np.testing.assert_array_equal(exported(obs).numpy(), action)  # inference mode: nothing moves between calls
