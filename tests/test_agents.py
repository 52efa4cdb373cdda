"""Contract tests: every agent of the registry (tests/registry.py), and the deterministic family's own."""
import functools
import os

import numpy as np
import pytest
import tensorflow as tf

from agents.base import tracked
from agents.compiled import CompiledAgent
from agents.ddpg import DDPG
from agents.td3 import TD3
from buffers.types import Batch
from hand_nets import policy, q_value
from helpers import random_batch
from networks.mlp import mlp
import registry

DETERMINISTIC = [TD3, DDPG]  # the deterministic family: its metrics by numpy, sharding, bfloat16, numpy acting
OBS, ACT, LOW, HIGH = registry.OBS, len(registry.LOW), registry.LOW, registry.HIGH
net = functools.partial(mlp, hidden=[16, 16])


def batch(rng, n=32):
    return random_batch(rng, OBS, LOW, HIGH, n)


SPEED = ("numpy_acting", "batch_shards", "update_precision")


def make(cls, compile="graph", seed=0, **kwargs):
    """The agent with its update compiled (`CompiledAgent`): speed settings go to the learner."""
    import keras

    from agents.compiled import CompiledAgent

    keras.utils.set_random_seed(seed)
    speed = {k: kwargs.pop(k) for k in SPEED if k in kwargs}
    return CompiledAgent(cls(OBS, LOW, HIGH, net, np.random.default_rng(seed), **kwargs), compile=compile, **speed)


def stack(batches):
    return Batch(*(np.stack(xs) for xs in zip(*batches)))


def one(b):
    """One batch as the learner takes it: K = 1 stacked batches."""
    return stack([b])


def metrics_by_numpy(agent, before, b):
    """An update's metrics recomputed in numpy from the networks' weights before it (the critic's
    after it for the actor's loss, as the actor steps on the critic that has just stepped), for
    TD3 without smoothing noise: y = r + discount * min over the target critics at the target
    actor's action."""
    critics = ["critic1", "critic2"] if isinstance(agent, TD3) else ["critic"]
    next_action = policy(before["actor_target"], b.next_obs, LOW, HIGH)
    y = b.reward + b.discount * np.min([q_value(before[c + "_target"], b.next_obs, next_action) for c in critics], axis=0)
    qs = [q_value(before[c], b.obs, b.action) for c in critics]
    pi = policy(before["actor"], b.obs, LOW, HIGH)
    expected = {
        "target_q": y.mean(),
        "critic_loss": sum(np.mean((q - y) ** 2) for q in qs),
        "td_error": np.max([np.abs(y - q) for q in qs], axis=0),
        "actor_loss": -np.mean(q_value(getattr(agent, critics[0]).get_weights(), b.obs, pi)),
    }
    expected.update({f"q{i + 1}": q.mean() for i, q in enumerate(qs)})
    return expected


def network_weights(agent):
    names = [n for n in ("actor", "actor_target", "critic", "critic_target", "critic1", "critic2", "critic1_target",
                         "critic2_target") if hasattr(agent, n)]
    return {n: [w.copy() for w in getattr(agent, n).get_weights()] for n in names}


@pytest.mark.parametrize("cls", DETERMINISTIC)
def test_deterministic_updates_metrics_are_their_formulas_in_numpy(cls):
    agent = make(cls, **({"target_noise": 0.0} if cls is TD3 else {}))  # no noise: the last update is recomputed below
    rng = np.random.default_rng(1)
    for n in (32, 17):
        before, b = network_weights(agent.agent), batch(rng, n)
        metrics = agent.update(one(b))
    for key, value in metrics_by_numpy(agent.agent, before, b).items():  # TD3's 2nd update is a delayed one
        np.testing.assert_allclose(metrics[key], value, rtol=1e-4, atol=1e-5, err_msg=key)


def test_bad_agent_arguments_are_named():
    with pytest.raises(ValueError, match="policy_delay"):
        TD3(OBS, LOW, HIGH, net, np.random.default_rng(0), policy_delay=0)
    with pytest.raises(ValueError, match="tau must be in"):
        TD3(OBS, LOW, HIGH, net, np.random.default_rng(0), tau=2.0)
    with pytest.raises(ValueError, match="compile"):
        make(TD3, compile="turbo")


@pytest.mark.parametrize("cls", DETERMINISTIC)
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_numpy_fast_act_matches_tensorflow_and_is_never_stale(cls, mode):
    fast, plain = make(cls, mode, numpy_acting=True), make(cls, mode, numpy_acting=False)
    assert fast.agent.acting.in_numpy and not plain.agent.acting.in_numpy
    rng = np.random.default_rng(4)
    obs = rng.normal(size=(9, OBS)).astype(np.float32)
    np.testing.assert_allclose(fast.act(obs, False), plain.act(obs, False), rtol=1e-5, atol=1e-6)
    for i in range(3):  # after every update, including TD3's non-delayed ones, both act alike
        b = batch(rng)
        fast.update(one(b)), plain.update(one(b))
        np.testing.assert_allclose(fast.act(obs, False), plain.act(obs, False), rtol=1e-4, atol=1e-5)
        for w_np, w_tf in zip(fast.agent.acting._weights, fast.agent.actor.get_weights()):
            np.testing.assert_array_equal(w_np, w_tf)


def fused_and_one_by_one(fused, one_by_one, rng, ks=(3, 5, 1)):
    """The same K batches, stacked into one call of `fused` and one by one into `one_by_one`, for
    each K in `ks`: (K, the last one-by-one metrics, the fused call's metrics) per K."""
    out = []
    for k in ks:
        batches = [batch(rng) for _ in range(k)]
        for b in batches:
            m_ref = one_by_one.update(one(b))
        out.append((k, m_ref, fused.update(stack(batches))))
    return out


def assert_same_state(ref, got, rtol=1e-4):
    """Every number two agents' checkpoints hold is the same (to float32 rounding)."""
    ref, got = state_arrays(ref), state_arrays(got)
    assert ref.keys() == got.keys()
    for key in ref:
        for a, b in zip(ref[key], got[key], strict=True):
            np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("cls,kwargs", [(TD3, {}), (DDPG, {}), (DDPG, {"critic_l2": 0.01})])
@pytest.mark.parametrize("shards", [2, 4])
def test_batch_shards_compute_the_same_updates(cls, kwargs, shards):
    """A sharded update has the full batch's losses and gradients: same metrics, per-sample TD
    errors in the batch's order and weights as unsharded, over TD3's delayed updates, fused
    updates and (DDPG) a critic weight penalty that must count once, not once per shard."""
    whole, sharded = make(cls, **kwargs), make(cls, batch_shards=shards, **kwargs)
    rng = np.random.default_rng(6)
    for k in (1, 1, 3, 2):
        batches = [batch(rng) for _ in range(k)]
        m_ref = whole.update(one(batches[0])) if k == 1 else whole.update(stack(batches))
        m_sh = sharded.update(one(batches[0])) if k == 1 else sharded.update(stack(batches))
        for key in m_ref:
            np.testing.assert_allclose(m_sh[key], m_ref[key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert int(sharded.agent.updates.numpy()) == 7
    ref, sh = whole.trackables(), sharded.trackables()
    for name in ("actor", "actor_target", "actor_optimizer", "critic_optimizer"):  # Adam holds the critics' moments
        for a, b in zip(ref[name].variables, sh[name].variables, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=name)
    for name in {"critic", "critic1", "critic2", "critic_target", "critic1_target", "critic2_target"} & set(ref):
        for a, b in zip(ref[name].get_weights(), sh[name].get_weights(), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=name)
    assert sharded.update_trace_count == 1


@pytest.mark.parametrize("cls", DETERMINISTIC)
def test_bfloat16_update_precision_runs_the_updates_matmuls_only_in_bfloat16(cls, kernel_dtypes):
    """speed.update_precision=bfloat16: every matmul of the update is bfloat16 (float32 ones: none), the
    update stays close to the float32 one without being it, the weights stay float32, and acting
    stays the float32 forward pass of those weights (numpy and TF paths alike)."""
    import tensorflow as tf

    f32, bf16 = make(cls), make(cls, update_precision="bfloat16")
    plain_act = make(cls, update_precision="bfloat16", numpy_acting=False)
    assert kernel_dtypes(f32.update_graph()) == {tf.float32}
    assert kernel_dtypes(bf16.update_graph()) == {tf.bfloat16}
    rng = np.random.default_rng(8)
    for k in (1, 1, 3):  # TD3's delayed update and a fused call included
        batches = [batch(rng) for _ in range(k)]
        m_ref = f32.update(one(batches[0])) if k == 1 else f32.update(stack(batches))
        m_bf = bf16.update(one(batches[0])) if k == 1 else bf16.update(stack(batches))
        plain_act.update(one(batches[0])) if k == 1 else plain_act.update(stack(batches))
        np.testing.assert_allclose(m_bf["critic_loss"], m_ref["critic_loss"], rtol=0.05)
        np.testing.assert_allclose(m_bf["q1"], m_ref["q1"], rtol=0.05, atol=0.01)
    assert not np.allclose(m_bf["q1"], m_ref["q1"], rtol=1e-6, atol=0)  # bfloat16 did run
    assert all(w.dtype == np.float32 for w in bf16.agent.actor.get_weights())
    obs = rng.normal(size=(6, OBS)).astype(np.float32)
    forward = bf16.agent.box.from_unit(bf16.agent.acting._np_forward(bf16.agent.actor.get_weights(), obs))
    np.testing.assert_allclose(bf16.act(obs, False), forward, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(plain_act.act(obs, False), bf16.act(obs, False), rtol=1e-5, atol=1e-6)
    assert bf16.update_trace_count == 1


def test_update_precision_must_be_float32_or_bfloat16():
    with pytest.raises(ValueError, match="update_precision must be one of float32, bfloat16, got 'float16'"):
        make(TD3, update_precision="float16")


def test_batch_shards_must_be_a_positive_integer():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="batch_shards must be a positive integer"):
            make(TD3, batch_shards=bad)


@pytest.mark.parametrize("agent_name", ["td3", "ddpg", "dqn"])
def test_optimizers_are_adam_with_pytorchs_epsilon(make_cfg, agent_name):
    """The reference code runs PyTorch's Adam (epsilon 1e-8); Keras' default is 1e-7."""
    from omegaconf import OmegaConf

    from training.builder import build_run

    cfg = make_cfg(f"agent={agent_name}", "env=cartpole" if agent_name == "dqn" else "env=pendulum")
    OmegaConf.resolve(cfg)
    run = build_run(cfg, with_buffer=False)
    try:
        optimizers = [v for k, v in run.learner.trackables().items() if k.endswith("optimizer")]
        assert optimizers and all(opt.epsilon == 1e-8 for opt in optimizers)
    finally:
        run.close()


@pytest.mark.parametrize("weight_decay", [None, 0.1])
def test_adam_steps_each_variable_in_one_kernel_by_adams_formula(weight_decay):
    """agents.base's Adam (and MR.Q's AdamW) steps a large variable in one kernel and a small one
    in ops, both by PyTorch's formula (epsilon after the bias correction of sqrt(v)), with the
    decoupled weight decay before: four steps against the formula in float64, one of them with
    gradients near epsilon, where Keras' formula moves the weights about half as far."""
    from agents.optimizers import AdamW, adam

    lr, beta_1, beta_2, eps = 1e-2, 0.5, 0.999, 1e-8
    rng = np.random.default_rng(3)
    start = [rng.normal(size=(128, 128)), rng.normal(size=4)]  # one kernel, Keras' ops
    grads = [[rng.normal(size=w.shape) * scale for w in start] for scale in (3e-8, 1.0, 0.01, 3.0)]
    variables = [tf.Variable(w.astype(np.float32)) for w in start]
    opt = (adam(lr, beta_1) if weight_decay is None
           else AdamW(learning_rate=lr, weight_decay=weight_decay, beta_1=beta_1, epsilon=eps))
    opt.build(variables)
    step = tf.function(lambda g: opt.apply_gradients(zip(g, variables)))
    ops = [op.type for op in step.get_concrete_function([tf.constant(g, tf.float32) for g in grads[0]]).graph.get_operations()]
    assert ops.count("ResourceApplyAdam") == 1 and "AssignSubVariableOp" in ops  # the small one: Keras' ops
    w, m, v = [x.copy() for x in start], [np.zeros_like(x) for x in start], [np.zeros_like(x) for x in start]
    for t, g in enumerate(grads, start=1):  # torch.optim.Adam(W)'s step
        step([tf.constant(x, tf.float32) for x in g])
        for i in range(len(w)):
            w[i] = w[i] - lr * (weight_decay or 0.0) * w[i]
            m[i] = m[i] + (g[i] - m[i]) * (1 - beta_1)
            v[i] = v[i] + (g[i] ** 2 - v[i]) * (1 - beta_2)
            m_hat, v_hat = m[i] / (1 - beta_1 ** t), v[i] / (1 - beta_2 ** t)
            w[i] = w[i] - lr * m_hat / (np.sqrt(v_hat) + eps)
        if t == 1:  # the step that tells the formulas apart: PyTorch's moves each weight by about 0.7 lr, Keras' by 0.1 lr
            for got, want, before in zip(variables, w, start):
                np.testing.assert_allclose(got.numpy() - before, want - before, rtol=1e-3, atol=1e-6)  # w in float32
    for got, want in zip(variables, w):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 4


@pytest.mark.parametrize("lr,weight_decay,factor", [(1e-4, 1e-4, 1.0), (3e-4, 1e-4, 1 - 2.0 ** -24),
                                                    (3e-4, 0.01, np.float32(1 - 3e-6))])
def test_adamw_decays_by_pytorchs_factor_rounded_to_float32(lr, weight_decay, factor):
    """torch.optim.AdamW multiplies a float32 weight by 1 - lr * wd rounded to float32: 1 exactly at
    MR.Q's encoder settings (no decay), 1 - 2^-24 at its value's and policy's (twice the nominal),
    and DR.Q's 0.7% short. With a zero gradient Adam's step is 0, so one step is the decay alone
    (torch 2.13 gives these factors; Keras' w - w * wd * lr would move every weight here)."""
    from agents.optimizers import adamw

    w0 = np.random.default_rng(0).normal(size=64).astype(np.float32)
    variable = tf.Variable(w0)
    opt = adamw(lr, weight_decay, [variable])
    opt.apply_gradients([(tf.zeros(64), variable)])
    np.testing.assert_array_equal(variable.numpy(), w0 * np.float32(factor))
    assert factor == 1.0 or (variable.numpy() != w0).any()


def test_keras_on_another_backend_is_refused_with_the_fix():
    from agents.base import check_keras_backend

    check_keras_backend("tensorflow")
    with pytest.raises(ImportError, match="Set KERAS_BACKEND=tensorflow before Keras is imported"):
        check_keras_backend("jax")


OPENBLAS_THREADS = """
import ctypes, glob, os, sys
sys.path.insert(0, os.getcwd())
os.sched_setaffinity(0, range(os.cpu_count()))  # OpenBLAS caps its threads at the cores it may use: a test worker's one
from training.runtime import prepare_process
prepare_process()
import numpy
libs = glob.glob(os.path.join(os.path.dirname(numpy.__file__) + ".libs", "libscipy_openblas64_*.so"))
print(ctypes.CDLL(libs[0]).scipy_openblas_get_num_threads64_() if libs else "no OpenBLAS")
"""


@pytest.mark.parametrize("shell, threads", [(None, 1), ("2", min(2, os.cpu_count()))])
def test_numpys_blas_runs_one_thread_unless_the_shell_says_otherwise(shell, threads):
    """Acting in numpy between two updates: OpenBLAS's spinning pool on the update's cores made a
    Nature CNN's update in the loop twice as slow, so every entrypoint gives it one thread."""
    import subprocess
    import sys

    from helpers import ROOT

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | (
        {"OPENBLAS_NUM_THREADS": shell} if shell else {})
    proc = subprocess.run([sys.executable, "-c", OPENBLAS_THREADS], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if proc.stdout.strip() == "no OpenBLAS":
        pytest.skip("this numpy does not bundle OpenBLAS")
    assert proc.stdout.strip() == str(threads)


# --- Every agent that updates: how the update runs never changes what it computes ---------------

def state_arrays(agent) -> dict:
    """Every number a checkpoint holds: networks' weights (Batch Renormalization's running
    statistics included), optimizers' moments, counters, the RNG's state."""
    out = {}
    for name, t in (agent.trackables() if isinstance(agent, CompiledAgent) else tracked(agent)).items():
        if hasattr(t, "serialize"):  # Python state a checkpoint holds (DQN's step counter)
            out[name] = [np.asarray(float(t.serialize()))]
            continue
        variables = getattr(t, "weights", None) or getattr(t, "variables", None)
        if variables is None:
            variables = [t.state] if hasattr(t, "state") else [t]
        out[name] = [np.asarray(v.numpy()) for v in (variables() if callable(variables) else variables)]
    return out


def greedy_obs(rng, n):
    return rng.normal(size=(n, registry.OBS)).astype(np.float32)


@pytest.mark.parametrize("name,mode", [(name, mode) for name in registry.UPDATING
                                       for mode in registry.AGENTS[name].compare])
def test_compile_modes_compute_the_same_updates(name, mode):
    """eager, graph and XLA are one algorithm: same seed, same batches, every checkpointed number
    equal after (to float rounding; XLA fuses differently), and the same actions. (XLA compiles cost
    a minute each for most agents here: the registry names the modes compared.)"""
    settings = registry.AGENTS[name].xla_settings if mode == "xla" else {}
    graph, other = registry.build(name, "graph", **settings), registry.build(name, mode, **settings)
    rng = np.random.default_rng(3)
    for _ in range(4):
        b = registry.inputs(name, rng, graph.agent)
        m_g, m_o = graph.update(b), other.update(b)
    for k in m_g:
        np.testing.assert_allclose(m_o[k], m_g[k], rtol=1e-3, atol=1e-5, err_msg=k)
    assert_same_state(graph.agent, other.agent, rtol=1e-3 if mode == "xla" else 1e-4)
    obs = greedy_obs(rng, 3)
    np.testing.assert_allclose(other.act(obs, False), graph.act(obs, False), rtol=1e-4, atol=1e-5)
    assert graph.update_trace_count == 1


@pytest.mark.parametrize("name,mode", [(name, mode) for name in registry.UPDATING
                                       for mode in registry.AGENTS[name].fused])
def test_fused_updates_equal_the_same_updates_one_by_one(name, mode):
    """K stacked batches in one call are K updates in order: each K's metrics equal the last
    one-by-one update's (td_error of all K batches), and every checkpointed number after them
    (TD3's delay, CrossQ's renorm statistics through its warm-up, the target copies every 3
    updates of TD7, DQN and MR.Q, TD7's clipping range, MR.Q's reward scales, the temperature)
    equals the one-by-one run's; traced once."""
    settings = registry.AGENTS[name].xla_settings if mode == "xla" else {}
    # XLA compiles each K anew (15 s for CrossQ here): two Ks, still past CrossQ's warm-up of 4
    ks = (3, 5) if mode == "xla" else (3, 5, 1)
    one_by_one, fused = registry.build(name, mode, **settings), registry.build(name, mode, **settings)
    rng = np.random.default_rng(5)
    for k in ks:
        singles, batches = registry.stacked(name, rng, fused.agent, k)
        for b in singles:
            m_ref = one_by_one.update(b)
        m_fused = fused.update(batches)
        for key in m_ref:
            if key == "td_error":  # per sample, for prioritized replay: all K batches'
                assert m_fused[key].shape == (k * 32,)
            np.testing.assert_allclose(m_fused[key][-32:] if key == "td_error" else m_fused[key], m_ref[key],
                                       rtol=1e-4, atol=1e-5, err_msg=key)
    assert int(fused.agent.updates.numpy()) == int(one_by_one.agent.updates.numpy()) == sum(ks)
    assert_same_state(one_by_one.agent, fused.agent)
    obs = greedy_obs(np.random.default_rng(6), 4)
    np.testing.assert_allclose(fused.act(obs, False), one_by_one.act(obs, False), rtol=1e-4, atol=1e-5)
    if mode != "eager":
        assert fused._update_many.experimental_get_tracing_count() == 1


# --- Every agent of the registry: the contract the loop, checkpoints and export rely on -------------

@pytest.mark.parametrize("name", registry.UPDATING)
def test_update_is_traced_once_per_run(name):
    learner, rng = registry.build(name), np.random.default_rng(1)
    for n in (32, 32, 64, 17):  # new values and new batch sizes must not retrace
        metrics = learner.update(registry.inputs(name, rng, learner.agent, n))
    assert learner.update_trace_count == 1
    assert int(learner.agent.updates.numpy()) == 4
    if "td_error" in metrics:  # per sample, for prioritized replay
        assert metrics["td_error"].shape == (17,)


@pytest.mark.parametrize("name", registry.UPDATING)
def test_act_is_batched_in_the_action_space_and_explores_only_when_asked(name):
    learner = registry.build(name, **({"eps_start": 1.0} if name == "dqn" else {}))
    obs = greedy_obs(np.random.default_rng(2), 40)
    greedy = learner.act(obs, explore=False)
    np.testing.assert_array_equal(greedy, learner.act(obs, explore=False))
    explored = learner.act(obs, explore=True)
    if registry.AGENTS[name].discrete:
        assert greedy.shape == (40,) and np.issubdtype(greedy.dtype, np.integer)
        assert set(np.unique(explored)) <= set(range(registry.NUM_ACTIONS))
    else:
        assert greedy.shape == (40, ACT) and greedy.dtype == np.float32
        assert np.all(explored >= LOW) and np.all(explored <= HIGH)
    assert not np.array_equal(explored, greedy)


@pytest.mark.parametrize("name", registry.UPDATING)
def test_trackables_hold_every_stateful_part(name, tmp_path):
    """What trackables() hands the checkpoint is the whole agent: an agent of another seed restored
    from it after 2 updates continues with the same 2 updates (optimizer moments, counters, target
    copies, in-graph noise included) and acts the same."""
    import tensorflow as tf

    saved, other = registry.build(name, seed=0), registry.build(name, seed=1)
    rng = np.random.default_rng(3)
    for _ in range(2):
        saved.update(registry.inputs(name, rng, saved.agent))
    assert all(v is not None for v in saved.trackables().values())
    path = tf.train.Checkpoint(**saved.trackables()).write(str(tmp_path / "agent"))
    tf.train.Checkpoint(**other.trackables()).read(path).assert_consumed()
    other.refresh()
    for _ in range(2):
        b = registry.inputs(name, rng, saved.agent)
        m_saved, m_other = saved.update(b), other.update(b)
        for key in m_saved:
            np.testing.assert_array_equal(m_other[key], m_saved[key], err_msg=key)
    assert_same_state(saved.agent, other.agent, rtol=0)
    obs = greedy_obs(rng, 5)
    np.testing.assert_array_equal(other.act(obs, False), saved.act(obs, False))


@pytest.mark.parametrize("name", registry.UPDATING)
def test_policy_module_acts_like_the_agent_in_this_process(name):
    """`module(obs)` works before export too (it is what gets saved), for any batch size."""
    from agents.export import PolicyModule

    learner = registry.build(name)
    learner.update(registry.inputs(name, np.random.default_rng(7), learner.agent))
    module = PolicyModule(learner.agent)
    obs = greedy_obs(np.random.default_rng(8), 6)
    np.testing.assert_allclose(module(obs).numpy(), learner.act(obs, explore=False), rtol=1e-5, atol=1e-6)
    assert module(obs[:1]).shape[0] == 1
