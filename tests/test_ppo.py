"""PPO's own features against values computed by hand: GAE across terminations and time limits
(CleanRL's and SB3's treatment), the clipped surrogate, the clipped value loss, advantages
normalized with the unbiased std, the Gaussian's and the categorical's log-densities and entropies;
one minibatch's losses as the update computes them from the agent's own outputs; the learning rate's
annealing and the target-KL stop; a run resumed from its checkpoint ends as the uninterrupted run;
the bad settings a user would type; and CartPole learned."""
import json
import math
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from agents.ppo import PPO, PPONetworks, losses
from agents.ppo.returns import explained_variance, gae
from helpers import ROOT, final_weights, read_csv, resume


def test_gae_by_hand_across_a_termination_and_a_time_limit():
    """T = 3 steps of 1 env, gamma 0.9, lambda 0.5. Step 1 ends its episode: terminated (no bootstrap)
    or truncated (bootstrapped from the final observation's value 4, in SB3's treatment)."""
    r, v = np.array([[1.0], [2.0], [3.0]]), np.array([[0.5], [1.0], [2.0]])
    nxt = np.array([[1.0], [4.0], [6.0]])  # V(s1); V(final obs of the ended episode); V(s3), the bootstrap of the rollout
    g, lam = 0.9, 0.5
    ended = np.array([[False], [True], [False]])
    # terminated at step 1
    d2 = 3 + g * 6 - 2            # 6.4
    d1 = 2 + 0 - 1.0              # 1.0 (no bootstrap); the recursion stops here
    d0 = 1 + g * 1.0 - 0.5        # 1.4
    adv, ret = gae(r, v, nxt, ended, ended, g, lam)
    np.testing.assert_allclose(adv[:, 0], [d0 + g * lam * d1, d1, d2], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + v, rtol=1e-6)
    # truncated at step 1: bootstrapped from V(final obs) = 4, still no recursion across the end
    d1 = 2 + g * 4.0 - 1.0
    adv, _ = gae(r, v, nxt, np.zeros_like(ended), ended, g, lam)
    np.testing.assert_allclose(adv[:, 0], [d0 + g * lam * d1, d1, d2], rtol=1e-6)


def test_gae_with_lambda_one_is_the_discounted_return_minus_the_value():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    last = rng.normal(size=2)
    nxt = np.concatenate([v[1:], last[None]])
    adv, _ = gae(r, v, nxt, np.zeros((5, 2), bool), np.zeros((5, 2), bool), 0.99, 1.0)
    discounted = sum(0.99**k * r[k] for k in range(5)) + 0.99**5 * last
    np.testing.assert_allclose(adv[0], discounted - v[0], rtol=1e-5)


def test_the_clipped_surrogate_takes_the_pessimistic_side_of_the_clip():
    ratio = np.array([0.5, 0.9, 1.1, 1.5, 0.5, 1.5])
    adv = np.array([1.0, 1.0, 1.0, 1.0, -1.0, -1.0])
    # A > 0: min(r, clip(r)) A; A < 0: max(r, clip(r)) A (the loss is the negative)
    objective = [0.5, 0.9, 1.1, 1.2, -0.8, -1.5]
    out = losses.clipped_surrogate(tf.math.log(tf.constant(ratio, tf.float32)), tf.constant(adv, tf.float32), 0.2)
    assert float(out) == pytest.approx(-np.mean(objective), rel=1e-6)


def test_the_value_loss_clipped_around_the_old_value_takes_the_larger_error():
    value, old, ret = tf.constant([3.0, 0.0, 1.0]), tf.constant([1.0, 1.0, 1.0]), tf.constant([4.0, 2.0, 1.0])
    # kept within 0.5 of old: 1.5, 0.5, 1.0; errors: max((3-4)^2, (1.5-4)^2) = 6.25, max(4, 2.25) = 4, 0
    assert float(losses.value_loss(value, old, ret, 0.5)) == pytest.approx(0.5 * (6.25 + 4 + 0) / 3)
    assert float(losses.value_loss(value, old, ret, None)) == pytest.approx(0.5 * (1 + 4 + 0) / 3)


def test_advantages_are_normalized_with_the_unbiased_std_as_torch():
    x = np.array([1.0, 2.0, 4.0, 7.0], np.float32)
    expected = (x - x.mean()) / (x.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(losses.normalized(tf.constant(x)), expected, rtol=1e-6)


def test_the_gaussians_and_the_categoricals_densities_and_entropies():
    mean, log_std, action = np.array([[0.5, -1.0]]), np.array([0.2, -0.3]), np.array([[1.0, 0.0]])
    expected = stats.norm(mean, np.exp(log_std)).logpdf(action).sum()
    f32 = lambda x: tf.constant(x, tf.float32)  # noqa: E731
    assert float(losses.gaussian_log_prob(f32(mean), f32(log_std), f32(action))[0]) == pytest.approx(expected, rel=1e-5)
    entropy = stats.norm(0, np.exp(log_std)).entropy().sum()
    np.testing.assert_allclose(losses.gaussian_entropy(f32(log_std), 3), [entropy] * 3, rtol=1e-5)
    logits = np.array([[1.0, 2.0, 0.5]])
    p = np.exp(logits) / np.exp(logits).sum()
    assert float(losses.categorical_log_prob(f32(logits), tf.constant([1]))[0]) == pytest.approx(math.log(p[0, 1]), rel=1e-5)
    assert float(losses.categorical_entropy(f32(logits))[0]) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-5)


def test_explained_variance():
    assert explained_variance(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == 1.0
    assert explained_variance(np.zeros(3), np.array([1.0, 2.0, 3.0])) == 0.0  # residuals as varied as the targets
    assert explained_variance(np.array([1.0, 2.0, 2.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(1 - (2 / 9) / (2 / 3))
    assert math.isnan(explained_variance(np.zeros(3), np.ones(3)))


def agent(discrete: bool, **kw):
    space = {"num_actions": 3} if discrete else {"action_low": -np.ones(2), "action_high": 2 * np.ones(2)}
    return PPO(4, PPONetworks(hidden=[8, 8]), np.random.default_rng(0), **{"n_steps": 8, **space, **kw})


def image_agent(**kw):
    return PPO((6, 6, 2), PPONetworks(convs=[[4, 3, 1]], features=8), np.random.default_rng(0), num_actions=3,
               **{"n_steps": 8, **kw})


def test_on_images_policy_and_value_share_one_trunk_initialized_orthogonally_with_cleanrls_gains():
    """One convolution and one dense layer feed both heads; each kernel, flattened to (fan in, units),
    has orthogonal columns of norm gain (sqrt 2 in the trunk, 0.01 the policy's, 1 the value's), biases 0."""
    model = image_agent().model
    kernels = {layer.name: layer for layer in model.layers if layer.weights}
    assert sorted(kernels) == ["actor_out", "critic_out", "trunk_conv0", "trunk_features"]
    for name, gain in (("trunk_conv0", math.sqrt(2)), ("trunk_features", math.sqrt(2)), ("actor_out", 0.01),
                       ("critic_out", 1.0)):
        w, b = (v.numpy() for v in kernels[name].weights)
        w = w.reshape(-1, w.shape[-1])
        np.testing.assert_allclose(w.T @ w, gain**2 * np.eye(w.shape[1]), atol=1e-5 * gain**2, err_msg=name)
        assert not b.any(), name
    assert model.output_shape == [(None, 3), (None, 1)]  # the logits, the value


def test_sb3s_init_without_ortho_init_is_pytorchs_linear_default_and_the_log_std_starts_where_set():
    """network.ortho_init=false (the RL Zoo's MuJoCo PPO): every layer's kernel and bias uniform in
    +-1/sqrt(fan_in), PyTorch's nn.Linear default, not orthogonal; agent.log_std_init=-2: the
    Gaussian's std starts at e^-2, in acting's samples and in the update's log-density."""
    keras.utils.set_random_seed(0)
    ppo = PPO((4,), PPONetworks(hidden=[256, 256], activation="relu", ortho_init=False), np.random.default_rng(0),
              action_low=np.array([-1.0, -1.0]), action_high=np.array([1.0, 1.0]), n_steps=8, log_std_init=-2.0)
    layers = {layer.name: layer for layer in ppo.model.layers if layer.weights}
    assert sorted(layers) == ["actor_hidden0", "actor_hidden1", "actor_out", "critic_hidden0", "critic_hidden1", "critic_out"]
    for name, layer in layers.items():
        w, b = (v.numpy() for v in layer.weights)
        bound = 1 / math.sqrt(w.shape[0])
        assert np.abs(w).max() <= bound and np.abs(b).max() <= bound and b.any(), name
        # uniform on [-bound, bound]: variance bound^2 / 3 (orthogonal columns of gain g have g^2 / fan_in), its
        # estimate from n draws within 4 standard deviations, sqrt(0.8 / n) relative (the output layers have 256-512)
        assert abs(w.var() / (bound**2 / 3) - 1) < 4 * math.sqrt(0.8 / w.size), name
    assert layers["actor_hidden0"].activation.__name__ == "relu"
    np.testing.assert_array_equal(ppo.log_std.numpy(), [-2.0, -2.0])
    obs = np.zeros((4096, 4), np.float32)
    action, log_prob, _ = ppo.step(obs)
    mean = ppo.model(obs[:1])[0].numpy()[0]
    np.testing.assert_allclose(np.std(action - mean, axis=0), [math.exp(-2)] * 2, rtol=0.05)
    by_hand = np.sum(-0.5 * ((action - mean) / math.exp(-2)) ** 2 + 2.0 - 0.5 * math.log(2 * math.pi), axis=1)
    np.testing.assert_allclose(log_prob, by_hand, rtol=1e-4, atol=1e-4)


def test_sb3s_ppo_and_the_rl_zoos_tuned_mujoco_settings_compose(make_cfg):
    """agent=ppo_sb3 is SB3's PPO; with env=halfcheetah, the RL Zoo's tuned HalfCheetah (hyperparams/ppo.yml)."""
    sb3 = make_cfg("agent=ppo_sb3", "env=cartpole")
    assert (sb3.agent.anneal_lr, sb3.agent.clip_vloss, sb3.agent.bootstrap_truncation, sb3.agent.vf_coef) == (False, False, True, 1.0)
    assert sb3.network.obs_norm is False and sb3.agent.normalize_reward is False and sb3.network.ortho_init is True
    zoo = make_cfg("agent=ppo_sb3", "env=halfcheetah")
    assert (zoo.gamma, zoo.agent.n_steps, zoo.agent.num_minibatches, zoo.agent.update_epochs) == (0.98, 512, 8, 20)
    assert (zoo.agent.lr, zoo.agent.clip_coef, zoo.agent.gae_lambda, zoo.agent.max_grad_norm) == (2.0633e-05, 0.1, 0.92, 0.8)
    assert zoo.agent.vf_coef == 2 * 0.58096 and zoo.agent.ent_coef == 0.000401762 and zoo.agent.log_std_init == -2.0
    assert (zoo.network.ortho_init, zoo.network.activation, list(zoo.network.hidden)) == (False, "relu", [256, 256])
    assert zoo.network.obs_norm and zoo.agent.normalize_reward
    assert make_cfg("agent=ppo", "env=halfcheetah").agent.lr == 3e-4  # CleanRL's PPO keeps its own


@pytest.mark.parametrize("kind", ["discrete", "continuous", "images"])
def test_actings_log_probability_is_the_updates(kind):
    """The log-probabilities stored in a rollout (numpy; on images, the convolutions too) are those
    the update computes (TensorFlow) for the same actions: the first minibatch's ratio is 1."""
    discrete = kind != "continuous"
    ppo = image_agent() if kind == "images" else agent(discrete)
    if not discrete:  # a log-std of its own per dimension (it starts at 0, where a missing term hides)
        ppo.log_std.assign([0.3, -0.5])
        ppo.refresh()
    rng = np.random.default_rng(1)
    obs = (rng.integers(0, 256, (16, 6, 6, 2), dtype=np.uint8) if kind == "images"
           else rng.normal(size=(16, 4)).astype(np.float32))
    assert ppo.acting.in_numpy
    action, log_prob, value = ppo.step(obs)
    out, values = ppo.model(obs)
    ours, _ = ppo.distribution(out, tf.constant(action.astype(np.int32 if discrete else np.float32)))
    np.testing.assert_allclose(ours, log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, values[:, 0], rtol=1e-5, atol=1e-6)
    assert (not discrete) or set(np.unique(action)) <= {0, 1, 2}


@pytest.mark.parametrize("clip_vloss,norm_adv", [(True, True), (False, False)])
def test_one_minibatchs_losses_by_hand_from_the_agents_outputs(clip_vloss, norm_adv):
    """pg, value and entropy terms of one minibatch, from the actor's logits and the critic's values
    before the step, against numpy: the ratio to the stored log-probabilities, the advantages
    normalized or not, the value loss clipped around the stored values or not."""
    ppo = agent(True, clip_coef=0.1, clip_vloss=clip_vloss, norm_adv=norm_adv)
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(6, 4)).astype(np.float32)
    action = rng.integers(0, 3, 6).astype(np.int32)
    old_log_prob = rng.normal(-1.1, 0.3, 6).astype(np.float32)
    adv, ret, old_v = (rng.normal(size=6).astype(np.float32) for _ in range(3))
    logits, value = (x.numpy().astype(np.float64) for x in ppo.model(obs))
    value = value[:, 0]
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    ratio = np.exp(log_p[np.arange(6), action] - old_log_prob)
    a = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8) if norm_adv else adv
    pg = np.mean(np.maximum(-a * ratio, -a * np.clip(ratio, 0.9, 1.1)))
    err = (value - ret) ** 2
    if clip_vloss:
        err = np.maximum(err, (old_v + np.clip(value - old_v, -0.1, 0.1) - ret) ** 2)
    entropy = -(np.exp(log_p) * log_p).sum(axis=1).mean()
    out = ppo.minibatch_step(*(tf.constant(x) for x in (obs, action, old_log_prob, adv, ret, old_v)))
    np.testing.assert_allclose([float(out[0]), float(out[1]), float(out[2])], [pg, 0.5 * err.mean(), entropy], rtol=1e-5)


def rollout_of(ppo, n=16, seed=3):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    action, log_prob, value = ppo.step(obs)
    adv = rng.normal(size=n).astype(np.float32)
    return [tf.constant(x) for x in (obs, action.astype(np.int32), log_prob, adv, adv + value, value)]


def test_the_learning_rate_falls_linearly_with_the_runs_progress_unless_constant():
    ppo = agent(True, lr=1e-3, num_minibatches=2, update_epochs=1)
    out = ppo.update(*rollout_of(ppo), tf.constant(0.25))
    assert float(out["learning_rate"]) == pytest.approx(7.5e-4) == float(ppo.optimizer.learning_rate)
    flat = agent(True, lr=1e-3, num_minibatches=2, update_epochs=1, anneal_lr=False)
    assert float(flat.update(*rollout_of(flat), tf.constant(0.25))["learning_rate"]) == pytest.approx(1e-3)


def test_rmsprop_steps_by_pytorchs_formula():
    """w -= lr g / (sqrt(v) + eps) with v = 0.99 v + 0.01 g^2 (torch.optim.RMSprop, SB3's A2C), three
    steps in float64; the first with gradients near epsilon, where Keras' sqrt(v + eps) moves the
    weights 300x less."""
    from agents.optimizers import RMSprop

    lr, eps = 1e-2, 1e-5
    rng = np.random.default_rng(4)
    w0 = rng.normal(size=6)
    variable = tf.Variable(w0.astype(np.float32))
    opt = RMSprop(learning_rate=lr, rho=0.99, epsilon=eps)
    w, v = w0.copy(), np.zeros(6)
    for scale in (1e-6, 1.0, 0.1):
        g = rng.normal(size=6) * scale
        opt.apply_gradients([(tf.constant(g, tf.float32), variable)])
        v = 0.99 * v + 0.01 * g**2
        w = w - lr * g / (np.sqrt(v) + eps)
        np.testing.assert_allclose(variable.numpy() - w0, w - w0, rtol=1e-4, atol=1e-7)


def a2c_settings(**kw) -> dict:
    """conf/agent/a2c.yaml's agent settings."""
    from omegaconf import OmegaConf

    settings = OmegaConf.to_container(OmegaConf.load(f"{ROOT}/conf/agent/a2c.yaml").agent)
    settings.pop("_target_")
    return {**settings, **kw}


def test_a2c_is_one_rmsprop_step_down_the_a2c_loss():
    """agent=a2c's settings: a rollout's update is one step of PyTorch's RMSprop down
    -mean(A log pi(a|s)) - ent_coef mean(H) + vf_coef 0.5 mean((V - R)^2), its gradient clipped at a
    global norm of 0.5, the advantages neither normalized nor clipped: the weights by hand (float64)
    from the gradient of that loss, written here."""
    ppo = agent(True, **a2c_settings(ent_coef=0.01))
    rng = np.random.default_rng(5)
    obs = rng.normal(size=(10, 4)).astype(np.float32)
    action, log_prob, value = ppo.step(obs)
    adv = rng.normal(1.0, 2.0, 10).astype(np.float32)  # a mean far from 0: normalizing would show
    ret = (value + rng.normal(size=10)).astype(np.float32)
    variables = ppo.model.trainable_variables
    before = [v.numpy().astype(np.float64) for v in variables]
    with tf.GradientTape() as tape:
        logits, values = ppo.model(obs)
        log_p = tf.nn.log_softmax(logits)
        taken = tf.gather(log_p, action.astype(np.int32), batch_dims=1)
        entropy = -tf.reduce_sum(tf.exp(log_p) * log_p, axis=1)
        loss = (-tf.reduce_mean(adv * taken) - 0.01 * tf.reduce_mean(entropy)
                + 1.0 * 0.5 * tf.reduce_mean(tf.square(values[:, 0] - ret)))
    grads = [g.numpy().astype(np.float64) for g in tape.gradient(loss, variables)]
    norm = np.sqrt(sum(np.sum(g**2) for g in grads))
    grads = [g * min(1.0, 0.5 / norm) for g in grads]
    lr, eps = ppo.lr0, 1e-5
    expected = [w - lr * g / (np.sqrt(0.01 * g**2) + eps) for w, g in zip(before, grads)]
    out = ppo.update(*(tf.constant(x) for x in (obs, action.astype(np.int32), log_prob, adv, ret, value)), tf.constant(0.5))
    assert int(out["epochs"]) == 1 and float(out["learning_rate"]) == pytest.approx(7e-4)  # constant
    for got, want, w in zip(variables, expected, before):
        np.testing.assert_allclose(got.numpy() - w, want - w, rtol=1e-3, atol=1e-7)


def test_a_target_kl_stops_the_epochs_at_the_first_that_passes_it():
    tight = agent(True, num_minibatches=2, update_epochs=5, target_kl=1e-12, lr=1e-2)
    assert int(tight.update(*rollout_of(tight), tf.constant(0.0))["epochs"]) == 1
    free = agent(True, num_minibatches=2, update_epochs=5, lr=1e-2)
    assert int(free.update(*rollout_of(free), tf.constant(0.0))["epochs"]) == 5


# the observation and reward statistics on, so that the resumed run ends as the whole only if they are checkpointed
RUN = ["agent=ppo", "env=cartpole", "num_envs=2", "agent.n_steps=64", "agent.num_minibatches=4",
       "agent.update_epochs=2", "eval_every=256", "eval_episodes=2", "deterministic=true", "logger.progress=false",
       "checkpoint.every=256", "network.hidden=[16,16]", "network.obs_norm=true", "agent.normalize_reward=true"]


def train(run_dir, *overrides):
    return subprocess.run([sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("env", [[], ["env=minatar", "network.obs_norm=false", "network.convs=[[4,3,1]]",
                                       "network.features=16"]], ids=["cartpole", "minatar"])
def test_a_run_resumed_from_its_checkpoint_ends_as_the_uninterrupted_run(tmp_path, env):
    """The run's directory as a run stopped after its checkpoint at 256 of 768 steps leaves it,
    resumed: the same weights (networks, Adam's moments, the in-graph generator) and evaluations;
    on MinAtar's images too (sampled evaluations: the numpy generator is checkpointed)."""
    whole, half = tmp_path / "whole", tmp_path / "half"
    proc = train(whole, "total_steps=768", "checkpoint.keep=5", *env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shutil.copytree(whole, half)
    for later in ("step_0000000512", "step_0000000768"):
        shutil.rmtree(half / "checkpoints" / later)
    (half / "summary.json").unlink()
    proc = resume(half)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "from step_0000000256" in proc.stdout, proc.stdout
    a, b = final_weights(whole), final_weights(half)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert [r["return_mean"] for r in read_csv(whole / "eval.csv")] == [r["return_mean"] for r in read_csv(half / "eval.csv")]


def test_rewards_are_scaled_by_the_running_std_of_the_discounted_return_and_clipped():
    """Two envs, gamma 0.5: returns G = 0.5 G (1 - terminated) + r, their population variance over
    every env and step so far (beside the prior of weight 1e-4), r / sqrt(var + 1e-8), clipped at 10."""
    from networks.normalization import INITIAL_COUNT, ReturnScaler

    scaler = ReturnScaler(2, gamma=0.5)
    steps = [([1.0, 2.0], [False, True]), ([3.0, -1.0], [True, False]), ([100.0, 0.0], [False, False])]
    returns, seen = np.zeros(2), []
    for reward, terminated in steps:
        returns = returns * 0.5 * (1 - np.array(terminated)) + np.array(reward)
        seen.extend(returns)
        n = len(seen)
        mean = np.sum(seen) / (n + INITIAL_COUNT)
        var = (np.sum((np.array(seen) - mean) ** 2) + INITIAL_COUNT * (1 + mean**2)) / (n + INITIAL_COUNT)
        expected = np.clip(np.array(reward) / np.sqrt(var + 1e-8), -10, 10)
        np.testing.assert_allclose(scaler(np.array(reward), np.array(terminated)), expected, rtol=1e-5)
    calm = ReturnScaler(1, gamma=0.0)
    for _ in range(1000):
        calm(np.array([0.001]), np.array([False]))
    assert calm(np.array([1.0]), np.array([False]))[0] == 10.0  # 1 / sqrt(about 1e-3): clipped


def test_normalized_observations_are_clipped_in_numpy_and_in_the_export():
    from agents.export import PolicyModule
    from agents.ppo.learner import CompiledRollout
    from networks.normalization import RunningNormalizer

    norm = RunningNormalizer(4, clip=10.0)
    norm.update(np.random.default_rng(0).normal(size=(50, 4)) * 0.01)
    learner = CompiledRollout(agent(False), obs_norm=norm)
    obs = np.array([[0.0, 0.0, 0.0, 0.0], [5.0, -5.0, 0.001, 0.0]], np.float32)  # far outside: clipped
    assert np.abs(norm(obs)).max() == 10.0
    module = PolicyModule(learner.agent, norm)
    np.testing.assert_allclose(module(tf.constant(obs)).numpy(), learner.act(obs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides,problem", [
    (["agent.n_steps=100", "agent.num_minibatches=32"], "does not split into agent.num_minibatches=32"),
    (["buffer=prioritized"], "keeps no replay buffer"),
    (["network=mlp"], "network=ppo"),
    (["agent.clip_coef=0"], "agent.clip_coef must be > 0"),
    (["agent.log_std_init=abc"], "agent.log_std_init must be a number"),
    (["network.ortho_init=maybe"], "network.ortho_init must be true or false"),
])
def test_bad_settings_are_named(cli, tmp_path, overrides, problem):
    proc = cli.train(tmp_path, "agent=ppo", "env=cartpole", *overrides)
    assert proc.returncode == 2 and problem in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.slow
def test_ppo_learns_cartpole(tmp_path):
    """CleanRL's classic-control settings (conf/tuned/ppo_cartpole.yaml), its learning rate annealed over
    100k of its 500k steps: evaluations above 400 from 40k on (a random policy scores about 20; CleanRL's
    500k runs end at 490), a policy that moved (KLs above 0, its clip engaged) and whose entropy fell
    below a uniform policy's ln 2."""
    proc = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp_path}", "agent=ppo", "env=cartpole",
                           "total_steps=100000", "eval_every=20000", "deterministic=true", "logger.progress=false",
                           "checkpoint.every=0"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = [(int(r["step"]), float(r["return_mean"])) for r in read_csv(tmp_path / "eval.csv")]
    assert all(ret > 400 for step, ret in evals if step >= 40000), evals
    updates = read_csv(tmp_path / "update.csv")
    assert max(float(r["approx_kl"]) for r in updates) > 1e-4
    assert max(float(r["clip_fraction"]) for r in updates) > 0
    assert np.mean([float(r["entropy"]) for r in updates[-20:]]) < math.log(2) - 0.05


@pytest.mark.slow
def test_a2c_learns_cartpole(tmp_path):
    """conf/agent/a2c.yaml (SB3's A2C, 8 envs x 5 steps): an evaluation of 400 or more within 30k steps
    (a random policy scores about 20). A2C's CartPole runs learn fast and then fall and recover, as SB3's
    do; the best evaluation is what a few seeds agree on (seeds 0-2 reach 482, 500 and 467)."""
    proc = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp_path}", "agent=a2c", "env=cartpole",
                           "total_steps=30000", "eval_every=5000", "deterministic=true", "logger.progress=false",
                           "checkpoint.every=0"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = [float(r["return_mean"]) for r in read_csv(tmp_path / "eval.csv")]
    assert max(evals) >= 400, evals


class Probe:
    """A policy that always pushes left, whose value of an observation is 10 x its cart position + 1."""

    def step(self, obs):
        n = len(obs)
        return np.asarray(obs, np.float32), np.zeros(n, np.int64), np.zeros(n, np.float32), self.values(obs)

    def values(self, obs):
        return (np.asarray(obs)[:, 0] * 10 + 1).astype(np.float32)

    def env_action(self, action):
        return action

    def scale_rewards(self, reward, terminated):
        return reward


@pytest.mark.parametrize("bootstrap", [True, False])
def test_a_rollouts_next_values_are_of_the_same_episode(bootstrap):
    """CartPole cut at 3 steps (no pole falls that soon): within an episode V(s_{t+1}) is the next
    step's value; at the cut, the value of the final observation (SB3) or nothing (CleanRL, where the
    cut ends the return); after the rollout, the value of the envs' observations."""
    from envs.factory import make_vector_env
    from training.rollout import collect

    envs = make_vector_env("CartPole-v1", 2, seed=0, max_episode_steps=3)
    obs, _ = envs.reset(seed=0)
    probe = Probe()
    rollout, last, episodes, _ = collect(probe, envs, obs, 5, bootstrap_truncation=bootstrap)
    envs.close()
    assert rollout["ended"][:, 0].tolist() == [False, False, True, False, False] and not rollout["terminated"].any()
    values = rollout["value"]
    np.testing.assert_array_equal(rollout["next_value"][[0, 1, 3]], values[[1, 2, 4]])
    np.testing.assert_array_equal(rollout["next_value"][4], probe.values(last))
    cut = rollout["next_value"][2]
    if bootstrap:  # the final observation is the one after the reset's predecessor, not the reset's own
        assert not np.allclose(cut, values[3]) and np.all(cut != 0)
    else:
        np.testing.assert_array_equal(cut, 0.0)
    assert [length for _, _, length in episodes] == [3, 3]


def test_async_envs_that_could_not_be_saved_restart_from_a_fresh_reset_on_resume(tmp_path):
    """Async vector envs keep their state in their worker processes, out of a checkpoint's reach: the
    resumed run says so, resets them, and goes on."""
    proc = train(tmp_path, "total_steps=256", "speed.vectorization=async")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = resume(tmp_path, "total_steps=512")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "they restart from a fresh reset" in proc.stdout + proc.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 512
