"""MR.Q (agents/mrq/): its maths against values computed by hand, its updates and schedule, its settings."""

import math

import numpy as np
import pytest
import tensorflow as tf

from agents import losses as shared
from agents.mrq import losses

BINS = tf.constant([-3.0, -1.0, 0.0, 2.0, 5.0])


def test_reward_bins_are_evenly_spaced_in_symlog_space():
    bins = losses.two_hot_bins(-10, 10, 65)
    assert bins.shape == (65,) and bins[32] == 0.0
    np.testing.assert_allclose([bins[0], bins[33], bins[-1]], [-(math.e ** 10 - 1), math.e ** 0.3125 - 1, math.e ** 10 - 1],
                               rtol=1e-6)
    np.testing.assert_allclose(bins, -bins[::-1])


def test_two_hot_splits_a_value_between_its_two_bins():
    x = tf.constant([0.5, -2.0, 2.0, 7.0, -4.0, -3.0])
    expected = [[0, 0, 0.75, 0.25, 0],  # 0.5 is a quarter of the way from 0 to 2
                [0.5, 0.5, 0, 0, 0],
                [0, 0, 0, 1, 0],  # on a bin: one-hot
                [0, 0, 0, 0, 1],  # beyond the ends: the end bin
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0]]
    encoded = losses.two_hot(x, BINS)
    np.testing.assert_allclose(encoded, expected, atol=1e-7)
    np.testing.assert_allclose(tf.linalg.matvec(encoded[:4], BINS)[:3], [0.5, -2.0, 2.0], rtol=1e-6)


def test_two_hot_mean_and_cross_entropy():
    np.testing.assert_allclose(losses.two_hot_mean(tf.zeros([1, 5]), BINS), [0.6], rtol=1e-6)  # (-3-1+0+2+5)/5
    logits = tf.constant([[1.0, 2.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    lse = math.log(math.e + math.e ** 2 + math.e ** 3 + 2)
    ce = losses.two_hot_cross_entropy(logits, tf.constant([0.5, -2.0]), BINS)
    np.testing.assert_allclose(ce, [-(0.75 * (3 - lse) + 0.25 * (0 - lse)), math.log(5)], rtol=1e-6)


def test_masked_mse_averages_over_every_element():
    pred = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(losses.masked_mse(pred, tf.zeros([2, 2]), tf.constant([1.0, 0.0])), 1.25)


def test_value_target_is_in_units_of_the_reward_scale():
    target = losses.scaled_value_target(tf.constant([2.0, 2.0]), tf.constant([0.9 ** 3, 0.0]),
                                        tf.constant([10.0, 10.0]), tf.constant(2.0), tf.constant(4.0))
    np.testing.assert_allclose(target, [(2 + 0.729 * 10 * 4) / 2, 1.0], rtol=1e-6)


def test_gumbel_softmax_and_realigned_actions():
    uniform = tf.constant([[math.exp(-1.0), math.exp(-math.exp(-2.0))]])  # Gumbel noise 0 and 2
    np.testing.assert_allclose(losses.gumbel_softmax(tf.constant([[1.0, 1.0]]), uniform, 2.0),
                               [[1 / (1 + math.e), math.e / (1 + math.e)]], rtol=1e-6)
    np.testing.assert_array_equal(losses.realigned_action(tf.constant([[0.1, 0.7, 0.2]]), True), [[0, 1, 0]])
    np.testing.assert_array_equal(losses.realigned_action(tf.constant([[-1.5, 0.25]]), False), [[-1.0, 0.25]])


def _ce(z, r):  # two bins [0, 1] with logits [0, z]: p(1) = sigmoid(z)
    p = 1 / (1 + math.exp(-z))
    return -((1 - r) * math.log(1 - p) + r * math.log(p)) if 0 < r < 1 else -math.log(p if r == 1 else 1 - p)


@pytest.mark.parametrize("done_weight", [0.1, 0.0])
def test_model_rollout_loss_unrolls_its_predictions_and_masks_after_termination(done_weight):
    """A model that adds the action to the embedding and reads the done flag and the reward logit
    off the result, unrolled 3 steps from embeddings 0 and 1 with actions of 1: predictions 1, 2, 3
    and 2, 3, 4. The second sample terminates at its first step, so only that step counts for it."""
    def model(zs, action):
        nxt = zs + action
        return nxt, nxt, tf.concat([tf.zeros_like(nxt), nxt], axis=1)

    zs = tf.constant([[0.0], [1.0]])
    actions = tf.ones([2, 3, 1])
    next_zs = tf.constant([[[1.0]] * 3, [[2.0]] * 3])
    reward = tf.constant([[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]])
    terminated = tf.constant([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    total, parts = losses.model_rollout_loss(model, zs, actions, next_zs, reward, terminated, tf.constant([0.0, 1.0]),
                                             1.0, 0.1, tf.constant(done_weight))
    dynamics = 0 + (1 + 0) / 2 + (4 + 0) / 2
    done = (1 + 1) / 2 + (4 + 0) / 2 + (9 + 0) / 2
    rewards = (_ce(1, 0) + _ce(2, 1)) / 2 + _ce(2, 1) / 2 + _ce(3, 0.5) / 2
    np.testing.assert_allclose([parts["dynamics"], parts["done"], parts["reward"]], [dynamics, done, rewards], rtol=1e-6)
    np.testing.assert_allclose(total, dynamics + 0.1 * rewards + done_weight * done, rtol=1e-6)


def test_model_rollout_loss_with_the_squared_reward_error():
    """The design study's "MSE reward loss": the reward head's one output against the reward,
    squared, with the same masks; predictions 1, 2, 3 and 2, 3, 4 as above."""
    def model(zs, action):
        nxt = zs + action
        return nxt, nxt, nxt

    reward = tf.constant([[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]])
    terminated = tf.constant([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    _, parts = losses.model_rollout_loss(model, tf.constant([[0.0], [1.0]]), tf.ones([2, 3, 1]),
                                         tf.constant([[[1.0]] * 3, [[2.0]] * 3]), reward, terminated, None, 1.0, 0.1,
                                         tf.constant(0.1), losses.reward_squared_error)
    np.testing.assert_allclose(parts["reward"], (1 + 1) / 2 + 1 / 2 + 2.5 ** 2 / 2, rtol=1e-6)


# --- the agent --------------------------------------------------------------------------------------
TINY_NET = dict(zs_dim=8, za_dim=4, zsa_dim=8, encoder_hidden=16, value_hidden=16, policy_hidden=16)
OBS = 5


def mrq(discrete=False, **kwargs):
    from agents.mrq import MRQ
    from agents.mrq.networks import MRQNetworks

    actions = {"num_actions": 3} if discrete else {"action_low": -2 * np.ones(2), "action_high": 2 * np.ones(2)}
    return MRQ((OBS,), MRQNetworks(**TINY_NET), np.random.default_rng(0), enc_horizon=3, q_horizon=2,
               **actions, **kwargs)


def runs_batch(rng, agent, scale, n=16):
    """MR.Q's inputs to one update, random, stacked as one (K = 1)."""
    from agents.mrq.replay import RunsBatch
    from buffers.types import Sequences
    from helpers import random_batch

    h = agent.settings.enc_horizon
    if agent.discrete:
        batch = random_batch(rng, OBS, 0, 1, n)._replace(action=rng.integers(0, 3, n).astype(np.int32))
        run_action = rng.integers(0, 3, (n, h)).astype(np.int32)
    else:
        batch = random_batch(rng, OBS, -2 * np.ones(2), 2 * np.ones(2), n)
        run_action = rng.uniform(-2, 2, (n, h, 2)).astype(np.float32)
    runs = Sequences(rng.normal(size=(n, OBS)).astype(np.float32), run_action, rng.normal(size=(n, h)).astype(np.float32),
                     rng.normal(size=(n, h, OBS)).astype(np.float32), (rng.random((n, h)) < 0.2).astype(np.float32))
    one = RunsBatch(batch, runs, np.float32(scale), np.float32(1.0))
    return tf.nest.map_structure(lambda x: np.asarray(x)[None], one)


def adamw_first_step(w, g, lr=1e-4, wd=1e-4, eps=1e-8):
    """AdamW's first step (PyTorch's, as agents.base's) from float32 weights w with gradient g: the
    decay, w times 1 - lr * wd rounded to float32, then Adam's step, lr * g / (|g| + eps) whatever the betas."""
    w = np.float32(w) * np.float32(1 - lr * wd)
    return w - lr * g / (np.abs(g) + eps)


def weights(model):
    return [w.numpy().copy() for w in model.weights]


def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_targets_encoder_and_reward_scale_move_every_target_update():
    """Fused schedule: every 3 updates, the first included: the targets become copies, the encoder
    the trained copy as it was, the reward scale the buffer's and the target's the one before; in
    between, the encoder the value and policy use stays as it is while its copy trains."""
    from helpers import compiled

    learner = compiled(mrq(target_update_every=3, encoder_schedule="fused"))
    agent, rng = learner.agent, np.random.default_rng(1)
    start = weights(agent.encoder_next)
    learner.update(runs_batch(rng, agent, 2.0))
    assert (agent.reward_scale.numpy(), agent.target_reward_scale.numpy()) == (2.0, 1.0)
    assert same(weights(agent.encoder), start) and not same(weights(agent.encoder_next), start)
    for scale in (5.0, 7.0):
        learner.update(runs_batch(rng, agent, scale))
        assert same(weights(agent.encoder), start) and agent.reward_scale.numpy() == 2.0
    trained, value, policy = weights(agent.encoder_next), weights(agent.value), weights(agent.policy_net)
    learner.update(runs_batch(rng, agent, 11.0))
    assert (agent.reward_scale.numpy(), agent.target_reward_scale.numpy()) == (11.0, 2.0)
    assert same(weights(agent.encoder), trained) and same(weights(agent.encoder_target), start)
    assert same(weights(agent.value_target), value) and same(weights(agent.policy_target), policy)
    assert not same(weights(agent.value), value)


@pytest.mark.parametrize("switch,reduce,scales", [
    ({}, np.min, (2.0, 11.0)),
    ({"target_value": "mean"}, np.mean, (2.0, 11.0)),  # the design study's "No min"
    ({"reward_scaling": False}, np.min, (1.0, 1.0)),  # "No reward scaling": both scales stay 1
])
def test_value_target_reads_the_targets_in_the_scale_of_their_time(switch, reduce, scales):
    """(R + discount * min Q'(zsa') * target scale) / scale, with zs', a' and zsa' from the target
    encoder and policy (no smoothing noise here)."""
    from helpers import compiled

    learner = compiled(mrq(target_update_every=3, target_noise=0.0, encoder_schedule="fused", **switch))
    agent, rng = learner.agent, np.random.default_rng(2)
    for scale in (2.0, 5.0, 7.0, 11.0, 13.0):  # the targets now differ from the online networks
        learner.update(runs_batch(rng, agent, scale))
    assert (agent.target_reward_scale.numpy(), agent.reward_scale.numpy()) == scales
    batch = tf.nest.map_structure(lambda x: tf.constant(x[0]), runs_batch(rng, agent, 1.0)).batch
    next_zs = agent.encoder_target.zs(batch.next_obs)
    next_action = tf.clip_by_value(tf.tanh(agent.policy_target(next_zs)), -1, 1)
    next_q = reduce(agent.value_target(agent.encoder_target.embed(next_zs, next_action)).numpy(), axis=1)
    target_scale, scale = scales
    expected = (batch.reward.numpy() + batch.discount.numpy() * next_q * target_scale) / scale
    np.testing.assert_allclose(agent.value_target_of(batch), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(agent.encoder_target.zs(batch.next_obs), agent.encoder.zs(batch.next_obs))


@pytest.mark.parametrize("value_loss", ["huber", "mse"])  # mse with buffer=uniform: the design study's "No LAP"
def test_the_value_loss_is_the_huber_or_squared_error_of_both_heads(value_loss):
    agent, rng = mrq(target_noise=0.0, value_loss=value_loss), np.random.default_rng(5)
    batch = tf.nest.map_structure(lambda x: tf.constant(x[0]), runs_batch(rng, agent, 1.0)).batch
    agent.reward_scale.assign(0.05)  # targets of some 20: errors beyond Huber's quadratic part
    target = agent.value_target_of(batch).numpy()[:, None]
    q = agent.value(agent.encoder.embed(agent.encoder.zs(batch.obs), agent.box.to_unit(batch.action))).numpy()
    err = np.abs(q - target)
    assert err.max() > 1.0
    expected = np.mean(np.where(err < 1, 0.5 * err ** 2, err - 0.5) if value_loss == "huber" else err ** 2)
    loss, _, _ = agent.value_update(batch)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


@pytest.mark.parametrize("schedule", ["author", "fused"])
@pytest.mark.parametrize("target_encoder,terminates", [(True, 1.0), (True, 0.0), (False, 1.0)])
def test_the_encoder_update_trains_against_its_target(schedule, target_encoder, terminates):
    """The dynamics targets are the next states' embeddings by the trained encoder's target: in the
    author's schedule the encoder target (the copy made before the block), in the fused one the
    encoder in use (which the trained copy replaces at the next copy; not the value's target
    encoder, a copy older). With target_encoder=false (the design study's "No target encoder"), the
    trained encoder's own, and its gradients flow through them too: its first AdamW step is the one
    of the whole gradient. The reward and done terms are weighed by their own weights (distinct
    here), the done term's only once a stored transition has terminated."""
    agent = mrq(target_encoder=target_encoder, reward_weight=0.3, done_weight=0.7, encoder_schedule=schedule)
    rng = np.random.default_rng(3)
    inputs = tf.nest.map_structure(lambda x: tf.constant(x[0]), runs_batch(rng, agent, 1.0))
    inputs = inputs._replace(terminates=tf.constant(terminates))
    runs = inputs.runs
    trained = agent.encoder_trained
    target = agent.encoder_target if schedule == "author" else agent.encoder
    others = [e for e in (agent.encoder, agent.encoder_target) if e is not trained]  # left as they are
    # every encoder made to embed unlike the others (random changes: a constant added to every weight
    # would not change a layer-normalized embedding)
    for encoder in {id(e): e for e in (trained, agent.encoder_target)}.values():
        encoder.zs.set_weights([w + rng.normal(0, 0.2, w.shape) for w in encoder.zs.get_weights()])
    copy, kept, value = weights(trained), [weights(e) for e in others], weights(agent.value)
    targets_by = target if target_encoder else trained
    variables = trained.trainable_variables
    with tf.GradientTape(persistent=True) as tape:
        next_zs = tf.reshape(targets_by.zs(tf.reshape(runs.next_obs, [-1, OBS])), [16, 3, -1])
        def model_loss(next_zs):
            return losses.model_rollout_loss(trained.predict, trained.zs(runs.obs), agent.box.to_unit(runs.action),
                                             next_zs, runs.reward, runs.terminated, agent.bins, 1.0, 0.3,
                                             0.7 * terminates)[0]
        expected, held = model_loss(next_zs), model_loss(tf.stop_gradient(next_zs))
    whole, held_grads = tape.gradient(expected, variables), tape.gradient(held, variables)
    zs_of = lambda encoder: encoder.zs(runs.next_obs[:, 0]).numpy()  # noqa: E731
    embeddings = [zs_of(e) for e in {id(e): e for e in (trained, agent.encoder, agent.encoder_target)}.values()]
    assert len(embeddings) == 3 - (schedule == "author")
    assert min(np.abs(a - b).max() for i, a in enumerate(embeddings) for b in embeddings[i + 1:]) > 0.1
    metrics = agent.encoder_update(runs, inputs.terminates)
    loss, parts = metrics["encoder_loss"], {k: metrics[f"{k}_loss"] for k in ("dynamics", "reward", "done")}
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    np.testing.assert_allclose(loss, parts["dynamics"] + 0.3 * parts["reward"] + 0.7 * terminates * parts["done"],
                               rtol=1e-6)
    assert all(same(weights(e), w) for e, w in zip(others, kept)) and same(weights(agent.value), value)
    assert not same(weights(trained), copy)

    kernel = [i for i, v in enumerate(variables) if v.path == trained.zs.weights[0].path][0]
    np.testing.assert_allclose(variables[kernel].numpy(), adamw_first_step(copy[kernel], whole[kernel].numpy()), atol=1e-9)
    if not target_encoder:  # the targets' gradients changed the step
        assert np.abs(adamw_first_step(copy[kernel], held_grads[kernel].numpy()) - variables[kernel].numpy()).max() > 1e-5


def runs_draws(rng, agent, k, n=16):
    """k draws of a block's runs, stacked (the author's schedule)."""
    from agents.mrq.replay import RunsDraw

    draws = [runs_batch(rng, agent, 1.0, n) for _ in range(k)]
    return RunsDraw(tf.nest.map_structure(lambda *x: np.concatenate(x), *[d.runs for d in draws]), np.ones(k, np.float32))


def scaled_batch(rng, agent, scale):
    """One update's inputs in the author's schedule, stacked as one (K = 1)."""
    from agents.mrq.replay import ScaledBatch

    one = runs_batch(rng, agent, scale)
    return ScaledBatch(one.batch, one.reward_scale)


def test_the_authors_schedule_trains_the_encoder_in_a_block_at_each_target_copy():
    """encoder_schedule=author (the default), as the author's `train()`: a block's first call makes
    the encoder target a copy of the encoder, then the encoder itself trains once per draw, in order,
    against that target (a twin stepped by `encoder_update` draw by draw ends equal); a later call of
    the same block leaves the target. The update trains the value and policy on the trained encoder,
    copies their targets and the reward scale at its copies, and leaves both encoders."""
    from helpers import compiled

    learner, twin = compiled(mrq(target_update_every=3)), mrq(target_update_every=3)
    agent, rng = learner.agent, np.random.default_rng(4)
    assert agent.needs.block.every == agent.needs.block.size == 3 and not hasattr(agent, "encoder_next")
    for mine, theirs in ((twin.encoder, agent.encoder), (twin.encoder_target, agent.encoder_target)):
        for m, t in zip(mine, theirs):
            m.set_weights(t.get_weights())
    agent.encoder_target.zs.set_weights([w + 0.3 for w in agent.encoder_target.zs.get_weights()])  # stale, as after a block
    start = weights(agent.encoder)
    first, second = runs_draws(rng, agent, 2), runs_draws(rng, agent, 1)
    learner.run_block(first, start=True)
    assert same(weights(agent.encoder_target), start) and not same(weights(agent.encoder), start)
    learner.run_block(second, start=False)
    assert same(weights(agent.encoder_target), start)
    for draws in (first, second):
        for i in range(len(draws.terminates)):
            twin.block_update(tf.nest.map_structure(lambda x: tf.constant(x[i]), draws))
    assert np.allclose(np.concatenate([w.ravel() for w in weights(twin.encoder)]),
                       np.concatenate([w.ravel() for w in weights(agent.encoder)]), atol=1e-6)
    assert "encoder_loss" in learner.extra_metrics()

    trained, value, policy = weights(agent.encoder), weights(agent.value), weights(agent.policy_net)
    metrics = learner.update(scaled_batch(rng, agent, 2.0))
    assert (agent.reward_scale.numpy(), agent.target_reward_scale.numpy()) == (2.0, 1.0)
    assert same(weights(agent.value_target), value) and same(weights(agent.policy_target), policy)
    assert same(weights(agent.encoder), trained) and same(weights(agent.encoder_target), start)
    assert not same(weights(agent.value), value) and "encoder_loss" in metrics
    learner.update(scaled_batch(rng, agent, 5.0))
    assert agent.reward_scale.numpy() == 2.0 and same(weights(agent.encoder), trained)


@pytest.mark.parametrize("steps_per_call,total_steps", [(0, 61), (7, 59)])
def test_the_loop_runs_a_block_before_every_target_copy(make_cfg, steps_per_call, total_steps):
    """The author's schedule through the loop, per update phase and driven from inside compiled calls
    (7 steps each, which the period does not divide): a block of `target_update_every` encoder
    updates before the 1st, 5th, 9th ... update, the last update of the run included (59 steps: 9
    updates), so that after u updates the encoder has trained ceil(u / 4) * 4 times."""
    from helpers import run_loop

    cfg = make_cfg("agent=mrq", "env=pendulum", *[f"network.{k}={v}" for k, v in TINY_NET.items()],
                   "agent.target_update_every=4", "learning_starts=50", f"total_steps={total_steps}", "batch_size=16",
                   f"speed.steps_per_call={steps_per_call}", "eval_every=1000", "eval_episodes=1",
                   "logger.progress=false", "logger.tensorboard=false", "checkpoint.every=0")
    summary, run = run_loop(cfg)
    agent, updates = run.learner.agent, total_steps - 50
    assert summary["updates"] == int(agent.value_optimizer.iterations) == updates
    assert int(agent.encoder_optimizer.iterations) == -(-updates // 4) * 4 == 12


def test_without_the_model_the_encoder_trains_through_the_value_loss():
    """encoder_loss=value (the design study's "No MR"): no model loss; the encoder in use takes the
    value loss's gradient (its first AdamW step is the one of that gradient), its copy is untouched,
    and the target copies leave the encoder in use as trained."""
    from helpers import compiled

    agent, rng = mrq(target_noise=0.0, encoder_loss="value", target_update_every=2), np.random.default_rng(8)
    inputs = runs_batch(rng, agent, 1.0)
    batch = tf.nest.map_structure(lambda x: tf.constant(x[0]), inputs).batch
    encoder, copy = weights(agent.encoder), weights(agent.encoder_next)
    variables = agent.encoder.zs.trainable_variables
    agent.copy_targets(tf.constant(1.0))  # as the first update does, so that the target below is its
    target = agent.value_target_of(batch)
    with tf.GradientTape() as tape:
        zsa = agent.encoder.embed(agent.encoder.zs(batch.obs), agent.box.to_unit(batch.action))
        expected = shared.huber(agent.value(zsa), target[:, None])
    kernel = tape.gradient(expected, variables)[0].numpy()
    learner = compiled(agent)
    metrics = learner.update(inputs)
    assert "encoder_loss" not in metrics
    np.testing.assert_allclose(metrics["value_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(variables[0].numpy(), adamw_first_step(encoder[0], kernel), atol=1e-9)
    assert same(weights(agent.encoder_next), copy)
    trained = weights(agent.encoder)
    agent.copy_targets(tf.constant(1.0))  # the encoder in use is kept as trained, and is the target's
    assert same(weights(agent.encoder), trained) and same(weights(agent.encoder_target)[:len(trained)], trained)


def test_the_design_studys_switches_of_the_networks():
    """reward_loss=mse gives the model one reward output whose loss is its squared error;
    network.linear_value makes each value head zsa . w + b; network.linear_model=false an MLP per
    predicted part (the design study's "MSE reward loss", "Linear value function" and "Non-linear model")."""
    from agents.mrq.networks import MRQNetworks

    agent = mrq(reward_loss="mse")
    assert agent.encoder_trained.model.outputs[0].shape[-1] == 1 + TINY_NET["zs_dim"] + 1
    inputs = tf.nest.map_structure(lambda x: tf.constant(x[0]), runs_batch(np.random.default_rng(6), agent, 1.0))
    runs, alive, expected = inputs.runs, np.ones(16), 0.0
    zs = agent.encoder_trained.zs(runs.obs)
    for i in range(3):  # the reward head's one output, squared error, masked after a termination
        _, zs, reward = agent.encoder_trained.predict(zs, agent.box.to_unit(runs.action[:, i]))
        expected += np.mean((reward.numpy()[:, 0] - runs.reward.numpy()[:, i]) ** 2 * alive)
        alive = alive * (1 - runs.terminated.numpy()[:, i])
    np.testing.assert_allclose(agent.encoder_update(runs, inputs.terminates)["reward_loss"], expected, rtol=1e-5)
    value = MRQNetworks(**TINY_NET, linear_value=True).value("v")
    zsa = np.random.default_rng(7).normal(size=(4, TINY_NET["zsa_dim"])).astype(np.float32)
    expected = [zsa @ value.get_layer(f"v_q{k}_value").kernel.numpy() + value.get_layer(f"v_q{k}_value").bias.numpy()
                for k in (1, 2)]
    np.testing.assert_allclose(value(zsa), np.concatenate(expected, axis=1), rtol=1e-5, atol=1e-6)
    assert len(value.trainable_variables) == 4

    # network.linear_model=false ("Non-linear model"): [done, next zs, reward] each from its own MLP
    model = MRQNetworks(**TINY_NET, linear_model=False).encoder((OBS,), 2, 5, "e").model

    def layer(x, name):
        return x @ model.get_layer(name).kernel.numpy() + model.get_layer(name).bias.numpy()

    def elu_ln(x):
        x = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
        return np.where(x > 0, x, np.expm1(x))

    parts = [layer(elu_ln(layer(elu_ln(layer(zsa, f"e_model_{p}_l1")), f"e_model_{p}_l2")), f"e_model_{p}_out")
             for p in ("done", "zs", "reward")]
    assert [x.shape[1] for x in parts] == [1, TINY_NET["zs_dim"], 5]
    np.testing.assert_allclose(model(zsa), np.concatenate(parts, axis=1), rtol=1e-4, atol=1e-5)


def test_discrete_evaluation_samples_the_policy_softmax():
    """The author's select_action takes the largest entry of the Gumbel-softmax, in evaluation too:
    a sample of softmax(pre-activation), whatever the temperature."""
    agent = mrq(discrete=True)
    out = agent.policy_net.get_layer("policy_out")
    out.kernel.assign(out.kernel * 20.0)  # pre-activations far apart: a uniform choice would not pass
    agent.acting.refresh()
    obs = np.random.default_rng(4).normal(size=(1, OBS)).astype(np.float32)
    pre = agent.acting(obs)[0]
    assert np.ptp(pre) > 1.0
    actions = agent.act(np.repeat(obs, 20000, axis=0), explore=False)
    freq = np.bincount(actions, minlength=3) / len(actions)
    np.testing.assert_allclose(freq, np.exp(pre) / np.exp(pre).sum(), atol=0.015)
    assert int(agent.policy(tf.constant(obs))[0]) == int(np.argmax(pre))  # export: the most likely action


class FixedDraws:
    """Stands in for the agent's tf.random.Generator: every normal draw is `normal` (broadcast to the
    shape asked for), every uniform one `uniform` (e^-1 by default: Gumbel noise -log(-log u) of 0)."""

    def __init__(self, normal=0.0, uniform=math.exp(-1.0)):
        self._normal, self._uniform = normal, uniform

    def normal(self, shape, **_):
        return tf.broadcast_to(tf.constant(self._normal, tf.float32), shape)

    def uniform(self, shape, **_):
        return tf.fill(shape, tf.constant(self._uniform, tf.float32))


def value_target_by_hand(agent, batch, noise=0.0):
    """(R + discount * min over heads of Q'(zsa') * target scale) / scale, with zs' and zsa' from the
    target encoder and a' = clip(tanh(pi'(zs')) + noise, -1, 1) (continuous actions)."""
    next_zs = agent.encoder_target.zs(batch.next_obs)
    next_action = np.clip(np.tanh(agent.policy_target(next_zs).numpy()) + noise, -1.0, 1.0).astype(np.float32)
    next_q = agent.value_target(agent.encoder_target.embed(next_zs, tf.constant(next_action))).numpy().min(axis=1)
    return ((batch.reward.numpy() + batch.discount.numpy() * next_q * agent.target_reward_scale.numpy())
            / agent.reward_scale.numpy())


@pytest.mark.parametrize("discrete,noises", [(False, (0.2, 0.2, 0.3)), (True, (0.1, 0.1, 0.15))])
def test_discrete_actions_halve_the_noises(discrete, noises):
    """The author halves the exploration noise, the target policy's noise and its clip for discrete
    actions, which live in [0, 1] rather than [-1, 1]."""
    agent = mrq(discrete=discrete)
    np.testing.assert_allclose((agent.exploration_noise, agent.target_noise, agent.noise_clip), noises)


def test_the_target_policys_noise_is_clipped():
    """Draws of +5 and -5 standard deviations (0.2 each) are clipped to +-0.3 before they are added
    to the target policy's action, itself clipped to [-1, 1]."""
    agent = mrq()
    agent.target_reward_scale.assign(1.0)  # as after the first target copy: the next values count
    agent._tf_rng = FixedDraws(normal=[5.0, -5.0])
    batch = tf.nest.map_structure(lambda x: tf.constant(x[0]), runs_batch(np.random.default_rng(9), agent, 1.0)).batch
    expected = value_target_by_hand(agent, batch, noise=np.array([0.3, -0.3]))
    np.testing.assert_allclose(agent.value_target_of(batch), expected, rtol=1e-5, atol=1e-6)


def test_the_lap_priority_is_the_largest_error_of_the_two_heads():
    """The update's td_error (LAP's priority before its floor and power) is max over the heads of
    |Q_k(zsa) - target|, the heads' errors being different."""
    agent, rng = mrq(target_noise=0.0), np.random.default_rng(10)
    inputs = tf.nest.map_structure(lambda x: tf.constant(x[0]), runs_batch(rng, agent, 1.0))
    batch = inputs.batch
    agent.target_reward_scale.assign(1.0)  # what the update's first target copy sets (the scale before it)
    target = value_target_by_hand(agent, batch)
    q = agent.value(agent.encoder.embed(agent.encoder.zs(batch.obs), agent.box.to_unit(batch.action))).numpy()
    err = np.abs(q - target[:, None])
    assert np.abs(err[:, 0] - err[:, 1]).min() > 1e-3
    np.testing.assert_allclose(agent.update(inputs)["td_error"], err.max(axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("discrete", [False, True])
def test_the_policy_ascends_both_value_heads_with_a_penalty_on_its_pre_activation(discrete):
    """The policy's loss: -mean over the batch and both heads of Q(zs, act(pre)) + w * mean(pre^2),
    act tanh, or for discrete actions the Gumbel-softmax softmax((pre + g) / tau) with tau = 10 (the
    author's), its Gumbel noise g held at 0 here."""
    agent = mrq(discrete=discrete, pre_activ_weight=1.0)
    agent._tf_rng = FixedDraws()
    obs = tf.constant(np.random.default_rng(11).normal(size=(16, OBS)).astype(np.float32))
    zs = agent.encoder.zs(obs)
    pre = agent.policy_net(zs).numpy()
    if discrete:
        action = np.exp(pre / 10.0) / np.exp(pre / 10.0).sum(axis=1, keepdims=True)
    else:
        action = np.tanh(pre)
    q = agent.value(agent.encoder.embed(zs, tf.constant(action))).numpy()
    assert np.abs(q[:, 0] - q[:, 1]).mean() > 1e-2 and np.mean(pre ** 2) > 1e-2  # the heads and the penalty count
    np.testing.assert_allclose(agent.policy_update(obs), -q.mean() + 1.0 * np.mean(pre ** 2), rtol=1e-5)


def test_the_value_gradient_is_clipped_to_its_global_norm():
    """With value_grad_clip 1e-6, the value's gradient is scaled to that norm before AdamW's first
    step, whose size then depends on it (its epsilon dominates): the Huber loss's gradient, written
    out here, rescaled by clip / ||g||."""
    agent, rng = mrq(target_noise=0.0, value_grad_clip=1e-6), np.random.default_rng(12)
    batch = tf.nest.map_structure(lambda x: tf.constant(x[0]), runs_batch(rng, agent, 1.0)).batch
    agent.target_reward_scale.assign(1.0)
    target = value_target_by_hand(agent, batch)[:, None]
    variables = agent.value.trainable_variables
    before = [v.numpy().copy() for v in variables]
    with tf.GradientTape() as tape:
        q = agent.value(agent.encoder.embed(agent.encoder.zs(batch.obs), agent.box.to_unit(batch.action)))
        err = tf.abs(q - target)
        loss = tf.reduce_mean(tf.where(err < 1.0, 0.5 * tf.square(err), err - 0.5))
    grads = [g.numpy() for g in tape.gradient(loss, variables)]
    norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    assert norm > 1e-3  # far above the clip
    agent.value_update(batch)
    for v, w, g in zip(variables, before, grads, strict=True):
        np.testing.assert_allclose(v.numpy(), adamw_first_step(w, g * (1e-6 / norm), lr=3e-4), atol=1e-8,
                                   err_msg=v.path)


# --- runs -------------------------------------------------------------------------------------------
TINY_RUN = [f"network.{k}={v}" for k, v in TINY_NET.items()] + [
    "batch_size=32", "learning_starts=100", "eval_every=200", "eval_episodes=2", "agent.target_update_every=50",
    "logger.progress=false", "checkpoint.every=0"]


def _train(run_dir, *overrides):
    import subprocess
    import sys

    from helpers import ROOT

    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "agent=mrq", *TINY_RUN, *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_resume_is_bit_exact_and_evaluate_exports_the_policy(tmp_path):
    """Extended from its checkpoint at 200 steps (100 updates in), a run ends where the
    uninterrupted 400-step run does: encoders (in use, in training, target), value, policy, their
    optimizers, reward scales, the generators, LAP priorities. Then evaluate.py exports its policy."""
    from helpers import evaluate, extended_run_ends_as_the_whole

    (whole, _), weights = extended_run_ends_as_the_whole(lambda d, *o: _train(d, "env=pendulum", *o), tmp_path, 400)
    parts = {k.split("/")[0] for k in weights}  # the trained encoder's weights are kept under its optimizer's
    assert {"encoder_target_zs", "encoder_optimizer", "value_target", "reward_scale",
            "target_reward_scale", "tf_rng"} <= parts
    proc = evaluate(f"run_dir={whole}", "episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = tf.saved_model.load(str(whole / "export" / "latest"))
    assert exported(np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)).numpy().shape == (4, 1)


def test_a_run_saved_when_the_networks_lived_in_networks_mrq_resumes_and_evaluates(tmp_path):
    """Runs saved before MR.Q's networks moved into agents/mrq/ name networks.mrq.MRQNetworks in their
    config and in each checkpoint's meta.json: resume=auto (which composes today's config) and
    evaluate.py (which rebuilds the saved one) take them as the class at its new place."""
    import json

    from helpers import evaluate

    run = tmp_path / "run"
    assert _train(run, "env=pendulum", "total_steps=150", "checkpoint.every=150").returncode == 0
    old, new = "networks.mrq.MRQNetworks", "agents.mrq.MRQNetworks"
    for path in [run / ".hydra" / "config.yaml", *run.glob("checkpoints/*/meta.json")]:
        text = path.read_text()
        assert new in text
        path.write_text(text.replace(new, old))
    assert json.loads(next(run.glob("checkpoints/step_*/meta.json")).read_text())["network"]["_target_"] == old
    proc = _train(run, "env=pendulum", "total_steps=200", "checkpoint.every=150", "resume=auto")
    assert proc.returncode == 0 and "from step_0000000150 at step 150" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    proc = evaluate(f"run_dir={run}", "episodes=1")
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("schedule", ["author", "fused"])
def test_bfloat16_update_precision_reaches_every_matmul_of_mrqs_update(schedule, kernel_dtypes):
    """speed.update_precision=bfloat16 for MR.Q as for the other agents: every matmul of the update
    and of the encoder's block (encoder, model, value, policy, targets; discrete actions build the
    same layers) in bfloat16 and none with the default, the losses close to float32's without being
    them, the weights float32, acting the float32 forward pass."""
    import keras

    from helpers import compiled

    learners = []
    for precision in ("float32", "bfloat16"):
        keras.utils.set_random_seed(0)
        learners.append(compiled(mrq(encoder_schedule=schedule), update_precision=precision))
    f32, bf16 = learners
    assert same(weights(f32.agent.value), weights(bf16.agent.value))
    graphs = lambda learner: [learner.update_graph()] + ([learner.block_graph()] if learner.block else [])  # noqa: E731
    assert len(graphs(f32)) == 1 + (schedule == "author")
    assert all(kernel_dtypes(g) == {tf.float32} for g in graphs(f32))
    assert all(kernel_dtypes(g) == {tf.bfloat16} for g in graphs(bf16))

    def update(learner):
        rng = np.random.default_rng(3)
        if learner.block is None:
            return learner.update(runs_batch(rng, learner.agent, 2.0))
        learner.run_block(runs_draws(rng, learner.agent, 1), start=True)
        return learner.update(scaled_batch(rng, learner.agent, 2.0))

    m32, m16 = (update(learner) for learner in learners)
    for key in ("encoder_loss", "value_loss", "policy_loss"):
        np.testing.assert_allclose(m16[key], m32[key], rtol=0.05, atol=1e-3, err_msg=key)
    assert not np.allclose(m16["value_loss"], m32["value_loss"], rtol=1e-6, atol=0)  # bfloat16 did run
    assert all(w.dtype == np.float32 for w in bf16.agent.value.get_weights())
    obs = np.random.default_rng(4).normal(size=(6, OBS)).astype(np.float32)
    np.testing.assert_allclose(bf16.agent.acting(obs), bf16.agent.acting.network(obs).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision, dtype", [("float32", tf.float32), ("bfloat16", tf.bfloat16)])
def test_update_precision_reaches_the_image_encoders_convolutions(precision, dtype, kernel_dtypes):
    """MR.Q on pixels: its image encoder's convolutions, forward and backward, follow the setting
    as its dense layers do."""
    from agents.mrq.networks import MRQNetworks
    from networks.precision import matmul_precision

    encoder = MRQNetworks(**TINY_NET).state_encoder((31, 31, 3), "enc")

    @tf.function
    def gradients(images):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(encoder(images))
        return tape.gradient(loss, encoder.trainable_variables)

    with matmul_precision(precision):
        graph = gradients.get_concrete_function(tf.TensorSpec((2, 31, 31, 3), tf.uint8)).graph
    assert {op.type for op in graph.get_operations()} >= {"Conv2D", "Conv2DBackpropFilter"}
    assert kernel_dtypes(graph) == {dtype}


def test_the_image_encoder_takes_the_smallest_image_it_leaves_a_pixel_of():
    """31 -> 15 -> 7 -> 3 -> 1 through 3x3 convolutions at strides 2, 2, 2, 1; 30 -> 14 -> 6 -> 2 -> 0."""
    from agents.mrq.networks import CONVS, MRQNetworks, smallest_image

    assert smallest_image(CONVS) == 31
    assert MRQNetworks(**TINY_NET).state_encoder((31, 40, 3), "enc").output.shape[-1] == TINY_NET["zs_dim"]
    with pytest.raises(ValueError, match="needs images of at least 31x31 pixels, got 30x40"):
        MRQNetworks(**TINY_NET).state_encoder((30, 40, 3), "enc")


def test_mrq_on_minatar_and_an_unknown_schedule_say_what_works(cli, tmp_path):
    """MinAtar's 10x10 frames: no image size to raise there, so the message names what trains it;
    an encoder schedule that does not exist: the two that do. Both exit 2 before training."""
    minatar = cli.train(tmp_path / "a", "agent=mrq", "env=minatar", "total_steps=20000")
    assert minatar.returncode == 2 and "got 10x10" in minatar.stderr and "agent=dqn (network=minatar_cnn)" in minatar.stderr
    schedule = cli.train(tmp_path / "b", "agent=mrq", "env=pendulum", "agent.encoder_schedule=authors")
    assert schedule.returncode == 2 and "encoder_schedule must be one of author, fused" in schedule.stderr
