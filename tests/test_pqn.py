"""PQN (agents/pqn.py, CleanRL's pqn.py): its Q(lambda) targets are the loop's GAE returns with
V = max_a Q, against CleanRL's own recursion by hand; one update is the RAdam step down the squared
error, clipped; RAdam by PyTorch's formula; epsilon's linear schedule counted in env steps acted;
the LayerNorm network; a resumed run ends as the whole; bad settings named; CartPole learned."""
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from agents.ppo.returns import gae
from helpers import ROOT, final_weights, read_csv, resume


def pqn(**kw):
    from agents.pqn import PQN
    from networks.mlp import mlp

    import functools
    network = functools.partial(mlp, hidden=[8, 8], layer_norm=True, init="orthogonal")
    return PQN((4,), network, np.random.default_rng(0), num_actions=3, total_steps=1000,
               **{"num_minibatches": 1, "update_epochs": 1, **kw})


def cleanrl_q_lambda(rewards, values, dones, next_value, next_done, gamma, q_lambda):
    """pqn.py's loop as written: `dones[t]` is whether the step before t ended its episode,
    `values[t]` max_a Q(s_t, a) at acting time, `next_value` max_a Q of the observation after the rollout."""
    returns = np.zeros_like(rewards)
    for t in reversed(range(len(rewards))):
        if t == len(rewards) - 1:
            returns[t] = rewards[t] + gamma * next_value * (1.0 - next_done)
        else:
            returns[t] = rewards[t] + gamma * (q_lambda * returns[t + 1] + (1 - q_lambda) * values[t + 1]) * (1.0 - dones[t + 1])
    return returns


def test_q_lambda_targets_are_the_loops_gae_returns_with_the_max_q_value():
    """A rollout of 6 steps x 2 envs with episode ends inside: the loop's returns (GAE with V = max Q,
    a time limit ending the return) equal CleanRL's Q(lambda) recursion."""
    rng = np.random.default_rng(3)
    t, n, gamma, lam = 6, 2, 0.99, 0.65
    rewards, values = rng.normal(size=(t, n)), rng.normal(size=(t, n))
    ended = np.zeros((t, n), bool)
    ended[2, 0] = ended[4, 1] = ended[5, 1] = True
    last = rng.normal(size=n)  # max Q of the observations after the rollout
    # the loop's next values (training/rollout.py's collect): the next step's within an episode, 0 across its end
    following = np.concatenate([values[1:], last[None]])
    next_value = np.where(ended, 0.0, following)
    _, returns = gae(rewards, values, next_value, ended, ended, gamma, lam)
    dones = np.concatenate([np.zeros((1, n)), ended[:-1]]).astype(float)  # CleanRL's: set before each step
    expected = cleanrl_q_lambda(rewards, values, dones, last, ended[-1].astype(float), gamma, lam)
    np.testing.assert_allclose(returns, expected, rtol=1e-6)
    assert not np.allclose(returns, rewards + gamma * next_value)  # lambda > 0: more than one-step targets


def test_one_update_is_radams_first_step_down_the_squared_error_of_q_on_the_returns():
    """One epoch of one minibatch: the td_loss is mean((R - Q(s, a))^2) before the step, and the step
    is RAdam's first, -lr * g (its momentum alone, bias-corrected), with g clipped to max_grad_norm."""
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(16, 4)).astype(np.float32)
    action = rng.integers(0, 3, 16).astype(np.int32)
    returns = rng.normal(size=16).astype(np.float32) * 3
    zeros = np.zeros(16, np.float32)
    for clip in (100.0, 0.05):
        agent = pqn(max_grad_norm=clip, lr=1e-2)
        before = [v.numpy() for v in agent.q.trainable_variables]
        with tf.GradientTape() as tape:
            q = tf.reduce_sum(agent.q(obs) * tf.one_hot(action, 3), axis=1)
            loss = tf.reduce_mean(tf.square(returns - q))
        grads = tape.gradient(loss, agent.q.trainable_variables)
        norm = math.sqrt(sum(float(tf.reduce_sum(g ** 2)) for g in grads))
        out = agent.update(obs, action, zeros, zeros, returns, zeros, tf.constant(0.0))
        assert float(out["td_loss"]) == pytest.approx(float(loss), rel=1e-5)
        scale = min(1.0, clip / norm)
        for w0, g, v in zip(before, grads, agent.q.trainable_variables):
            np.testing.assert_allclose(v.numpy() - w0, -1e-2 * scale * g.numpy(), rtol=1e-3, atol=1e-7)
    assert scale < 1  # the second agent's gradient was clipped


def test_the_learning_rate_anneals_with_the_runs_progress():
    agent = pqn(lr=1e-3)
    obs, zeros = np.zeros((4, 4), np.float32), np.zeros(4, np.float32)
    out = agent.update(obs, np.zeros(4, np.int32), zeros, zeros, zeros, zeros, tf.constant(0.25))
    assert float(out["learning_rate"]) == pytest.approx(7.5e-4)
    flat = pqn(lr=1e-3, anneal_lr=False)
    assert float(flat.update(obs, np.zeros(4, np.int32), zeros, zeros, zeros, zeros, tf.constant(0.25))["learning_rate"]) \
        == pytest.approx(1e-3)


def test_radam_steps_by_pytorchs_formula():
    """torch.optim.RAdam's step, eight steps in float64 by hand: the bias-corrected momentum alone
    while rho_t <= 5 (steps 1-5 at beta_2 0.999), then Adam's step times the rectification."""
    from agents.optimizers import RAdam

    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-8
    rng = np.random.default_rng(2)
    w0 = rng.normal(size=5)
    variable = tf.Variable(w0.astype(np.float32))
    opt = RAdam(learning_rate=lr, epsilon=eps)
    w, m, v = w0.copy(), np.zeros(5), np.zeros(5)
    rho_inf = 2 / (1 - b2) - 1
    rectified = []
    for t in range(1, 9):
        g = rng.normal(size=5)
        opt.apply_gradients([(tf.constant(g, tf.float32), variable)])
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g ** 2
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        rho_t = rho_inf - 2 * t * b2 ** t / c2
        step = lr * m / c1
        if rho_t > 5:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            step = step * rect * math.sqrt(c2) / (np.sqrt(v) + eps)
        rectified.append(rho_t > 5)
        w = w - step
        np.testing.assert_allclose(variable.numpy(), w, rtol=2e-5, atol=1e-6, err_msg=f"step {t}")
    assert rectified == [False] * 5 + [True] * 3


def test_epsilon_falls_linearly_over_the_env_steps_acted_and_exploration_is_uniform():
    """CleanRL's linear_schedule over exploration_fraction x total_steps, its clock the env steps
    acted (each rollout step counts every env, before acting); at epsilon 1 every action is drawn
    uniformly, at 0 the greedy one."""
    agent = pqn(exploration_fraction=0.5)  # total_steps 1000: epsilon reaches 0.05 at 500 steps
    obs = np.random.default_rng(0).normal(size=(250, 4)).astype(np.float32)
    draws = np.random.default_rng()
    draws.bit_generator.state = agent._rng.bit_generator.state  # the agent's stream, replayed by hand
    actions, log_prob, value = agent.step(obs)
    assert agent.acted.value == 250 and agent.epsilon() == pytest.approx(0.525)
    q = agent.q(obs).numpy()
    np.testing.assert_allclose(value, q.max(axis=1), rtol=1e-5, atol=1e-6)
    assert (log_prob == 0).all()
    greedy = q.argmax(axis=1)
    random, u = draws.integers(0, 3, 250), draws.random(250)
    np.testing.assert_array_equal(actions, np.where(u < 0.525, random, greedy))  # epsilon as of these 250 steps
    assert (actions != greedy).any()
    agent.step(obs)
    actions, _, _ = agent.step(obs)  # past 500 steps: epsilon 0.05
    assert np.mean(actions != agent.q(obs).numpy().argmax(axis=1)) < 0.1
    greedy_only = pqn(eps_start=0.0, eps_end=0.0)
    np.testing.assert_array_equal(greedy_only.step(obs)[0], greedy_only.q(obs).numpy().argmax(axis=1))
    uniform = pqn(eps_start=1.0, eps_end=1.0)
    counts = np.bincount(uniform.step(np.repeat(obs, 8, axis=0))[0], minlength=3)
    assert counts.min() > 0.3 * len(obs) * 8 / 3 * 2  # about 667 each of 2000
    np.testing.assert_array_equal(uniform.act(obs, explore=False), uniform.q(obs).numpy().argmax(axis=1))


def test_the_layer_norm_network_is_cleanrls_and_acts_alike_in_numpy():
    """network=mlp with layer_norm and orthogonal init: Dense -> LayerNorm (epsilon 1e-5) -> ReLU per
    hidden layer, kernels orthogonal of gain sqrt(2) (K^T K = 2 I), zero biases; numpy's forward
    pass (acting) gives Keras' outputs."""
    import keras

    from networks.mlp import mlp
    from networks.numpy_forward import forward_fn

    net = mlp(16, 4, hidden=[12, 8], layer_norm=True, init="orthogonal", name="q")
    norms = [layer for layer in net.layers if isinstance(layer, keras.layers.LayerNormalization)]
    assert [layer.epsilon for layer in norms] == [1e-5, 1e-5]
    for layer in (layer for layer in net.layers if isinstance(layer, keras.layers.Dense)):
        k = layer.kernel.numpy()
        small = k if k.shape[0] >= k.shape[1] else k.T
        np.testing.assert_allclose(small.T @ small, 2 * np.eye(small.shape[1]), atol=1e-5)
        assert not layer.bias.numpy().any()
    x = np.random.default_rng(0).normal(size=(5, 16)).astype(np.float32) * 3
    forward = forward_fn(net)
    np.testing.assert_allclose(forward([w.numpy() for w in net.weights], x), net(x).numpy(), rtol=1e-4, atol=1e-5)
    plain = mlp(16, 4, hidden=[12, 8], init="orthogonal", name="q")
    assert not any(isinstance(layer, keras.layers.LayerNormalization) for layer in plain.layers)


RUN = ["agent=pqn", "env=cartpole", "num_envs=2", "agent.n_steps=32", "agent.num_minibatches=2",
       "agent.update_epochs=2", "eval_every=128", "eval_episodes=2", "deterministic=true", "logger.progress=false",
       "checkpoint.every=128", "network.hidden=[16,16]"]


def train(run_dir, *overrides):
    return subprocess.run([sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_a_run_resumed_from_its_checkpoint_ends_as_the_uninterrupted_run(tmp_path):
    """Stopped after its checkpoint at 128 of 384 steps and resumed: the same weights (the network,
    RAdam's moments, epsilon's clock, the generators) and evaluations; epsilon is still falling."""
    whole, half = tmp_path / "whole", tmp_path / "half"
    proc = train(whole, "total_steps=384", "checkpoint.keep=5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    shutil.copytree(whole, half)
    for later in ("step_0000000256", "step_0000000384"):
        shutil.rmtree(half / "checkpoints" / later)
    (half / "summary.json").unlink()
    proc = resume(half)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "from step_0000000128" in proc.stdout, proc.stdout
    a, b = final_weights(whole), final_weights(half)
    assert a.keys() == b.keys() and any("acted" in k for k in a)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert [r["return_mean"] for r in read_csv(whole / "eval.csv")] == [r["return_mean"] for r in read_csv(half / "eval.csv")]
    assert 0.05 < float(read_csv(whole / "update.csv")[-1]["epsilon"]) < 1.0


@pytest.mark.parametrize("overrides,problem", [
    (["env=pendulum"], "discrete"),
    (["agent.q_lambda=1.5"], "agent.q_lambda must be in [0, 1]"),
    (["agent.exploration_fraction=0"], "agent.exploration_fraction must be in (0, 1]"),
    (["agent.optimizer=sgd"], "agent.optimizer must be one of radam, adam"),
    (["agent.num_minibatches=3"], "does not split into agent.num_minibatches=3"),
    (["buffer=prioritized"], "keeps no replay buffer"),
    (["network.layer_norm=maybe"], "network.layer_norm must be true or false"),
])
def test_bad_settings_are_named(cli, tmp_path, overrides, problem):
    proc = cli.train(tmp_path, "agent=pqn", "env=cartpole", *overrides)
    assert proc.returncode == 2 and problem in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.slow
def test_pqn_learns_cartpole(tmp_path):
    """The first 150k steps of CleanRL's 500k-step CartPole run (epsilon on its 500k schedule, at 0.43
    by the end; the rate held at its start): evaluations climb from a random policy's ~20 to 300 and
    more (395 on this machine), the last three averaging 150 or more, and Q-values grow towards the
    discounted return of long episodes. (The whole 500k run, `train.py agent=pqn env=cartpole`, ends
    at 488.5; CleanRL's 3 seeds at 495.1 +- 6.9.)"""
    proc = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp_path}", "agent=pqn", "env=cartpole",
                           "total_steps=150000", "agent.total_steps=500000", "agent.anneal_lr=false", "eval_every=25000",
                           "deterministic=true", "logger.progress=false", "checkpoint.every=0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = [float(r["return_mean"]) for r in read_csv(tmp_path / "eval.csv")]
    assert evals[0] < 50 and max(evals) >= 300 and np.mean(evals[-3:]) >= 150, evals
    assert float(read_csv(tmp_path / "update.csv")[-1]["q_values"]) > 20
