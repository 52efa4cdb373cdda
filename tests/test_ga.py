"""agent=ga: the genetic operators against hand values, the batched population forward against each
individual's own network, one trace per run, exact resume, bad input, and CartPole solved."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from agents.ga import GA
from agents.ga.operators import blx_crossover, elite_indices, gaussian_mutation, tournament_selection, truncation_selection
from networks.mlp import mlp
from networks.simba import simba

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_ga(population=6, network=None, discrete=True, **kwargs):
    network = network or (lambda i, o, **kw: mlp(i, o, hidden=[5], **kw))
    space = dict(num_actions=3) if discrete else dict(action_low=np.array([-2.0, 0.0]), action_high=np.array([2.0, 1.0]))
    return GA(obs_shape=(4,), network=network, rng=np.random.default_rng(0), population=population, **space, **kwargs)


# --- operators --------------------------------------------------------------------------------

def test_blx_crossover_spans_the_parents_interval_widened_by_alpha():
    a, b = tf.constant([1.0, -2.0, 3.0]), tf.constant([3.0, -1.0, 3.0])
    # lo = [1, -2, 3], d = [2, 1, 0]; alpha 0.5 widens by [1, 0.5, 0] each side
    np.testing.assert_allclose(blx_crossover(a, b, 0.5, tf.zeros(3)), [0.0, -2.5, 3.0])
    np.testing.assert_allclose(blx_crossover(a, b, 0.5, tf.ones(3)), [4.0, -0.5, 3.0])
    np.testing.assert_allclose(blx_crossover(a, b, 0.5, tf.fill([3], 0.5)), [2.0, -1.5, 3.0])  # the midpoint
    np.testing.assert_allclose(blx_crossover(a, b, 0.0, tf.ones(3)), [3.0, -1.0, 3.0])  # alpha 0: within the parents


def test_gaussian_mutation_adds_std_times_the_noise():
    np.testing.assert_allclose(gaussian_mutation(tf.constant([1.0, 2.0]), 0.1, tf.constant([2.0, -1.0])), [1.2, 1.9])


def test_selection_picks_the_fittest_contender():
    fitness = tf.constant([1.0, 9.0, 3.0, 7.0])
    gen = tf.random.Generator.from_seed(0)
    # a tournament of 64 draws from 4 contains the best almost surely (1 - (3/4)**64)
    np.testing.assert_array_equal(tournament_selection(fitness, 50, 64, gen), np.full(50, 1))
    np.testing.assert_array_equal(truncation_selection(fitness, 20, 1, gen), np.full(20, 1))
    assert set(truncation_selection(fitness, 200, 2, gen).numpy()) == {1, 3}
    # a tournament of one is a uniform draw: every individual is picked
    assert set(tournament_selection(fitness, 400, 1, gen).numpy()) == {0, 1, 2, 3}
    np.testing.assert_array_equal(elite_indices(fitness, 2), [1, 3])


def test_evolve_keeps_the_elites_unchanged_and_breeds_the_rest():
    ga = small_ga(population=6, elites=2, mutation_std=0.01)
    before = [w.numpy() for w in ga.weights]
    fitness = np.array([3.0, 1.0, 8.0, 5.0, 0.0, 2.0], np.float32)
    ga.evolve(tf.constant(fitness))
    after = [w.numpy() for w in ga.weights]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a[0], b[2])  # the fittest first
        np.testing.assert_array_equal(a[1], b[3])
        assert not any(np.array_equal(a[k], b[j]) for k in range(2, 6) for j in range(6))  # children are new
    for v, b in zip(ga.policy_network.weights, before):  # the policy is this generation's best
        np.testing.assert_array_equal(v.numpy(), b[2])


def test_mutation_alone_has_the_configured_std():
    """With crossover off and no elites, a child is a selected parent plus N(0, std^2) noise: one
    individual repeated makes every parent the same, so child - parent is the noise itself."""
    ga = small_ga(population=200, elites=0, crossover="none", mutation_std=0.3)
    for w in ga.weights:
        w.assign(tf.repeat(w[:1], 200, axis=0))
    parent = [w.numpy()[0] for w in ga.weights]
    ga.evolve(tf.zeros(200))
    noise = np.concatenate([(w.numpy() - p).ravel() for w, p in zip(ga.weights, parent)])
    assert noise.size > 5000
    assert abs(noise.std() - 0.3) < 0.01 and abs(noise.mean()) < 0.01


# --- the population as one network --------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mlp", "simba"])
def test_population_act_equals_each_individuals_own_network(kind):
    network = None if kind == "mlp" else (lambda i, o, **kw: simba(i, o, width=8, blocks=2, actor_width=8, actor_blocks=2, **kw))
    for discrete in (True, False):
        ga = small_ga(population=5, network=network, discrete=discrete)
        obs = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
        batched = ga.population_act(tf.constant(obs)).numpy()
        for p in range(5):
            ga.policy_network.set_weights(ga.individual(p))
            ga.acting.refresh()
            alone = ga.policy(tf.constant(obs[p:p + 1])).numpy()[0]
            np.testing.assert_allclose(batched[p], alone, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ga.act(obs[p:p + 1])[0], alone, rtol=1e-5, atol=1e-6)  # numpy acting too
        if not discrete:
            assert (batched[:, 0] >= -2).all() and (batched[:, 0] <= 2).all() and (batched[:, 1] >= 0).all()


def test_individuals_start_from_the_networks_own_initializer():
    ga = small_ga(population=4)
    first = ga.individual(0)
    assert not np.array_equal(first[0], ga.individual(1)[0])  # drawn apart
    bound = 1 / np.sqrt(4)  # torch init of the first layer: U(+-1/sqrt(fan_in))
    assert np.abs(ga.weights[0].numpy()).max() <= bound


# --- runs ---------------------------------------------------------------------------------------

def _train(run_dir, *overrides, timeout=600):
    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "agent=ga", "env=cartpole", "agent.population=8",
           "network.hidden=[8]", "eval_episodes=2", "deterministic=true", "logger.progress=false", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_one_trace_per_run_and_the_loop_counts_every_episode_step(make_cfg):
    from helpers import run_population

    cfg = make_cfg("agent=ga", "env=cartpole", "agent.population=4", "agent.episodes=2", "network.hidden=[8]",
                   "total_steps=600", "eval_every=300", "eval_episodes=1", "speed.env_in_graph=false")
    summary, run, records = run_population(cfg)
    assert run.learner.trace_counts == (1, 1)
    assert summary["generations"] == len(records) >= 2
    # each generation's steps are exactly its individuals' episode lengths: 2 episodes each
    steps = np.diff([0] + [step for step, _ in records])
    for (step, r), n in zip(records, steps):
        assert n >= 4 * 2 * 8  # CartPole episodes last at least 8 steps
    assert summary["steps"] == records[-1][0]


def test_resume_is_bit_exact(tmp_path):
    """A run resumed from its checkpoint ends with the population, the generator and the best
    policy of the uninterrupted run."""
    from helpers import final_weights, resume

    whole, extended = tmp_path / "whole", tmp_path / "extended"
    for run_dir, steps in ((whole, 3000), (extended, 1000)):
        proc = _train(run_dir, f"total_steps={steps}", "eval_every=500", "checkpoint.every=0")
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = resume(extended, "total_steps=3000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = final_weights(whole), final_weights(extended)
    assert any("population" in k for k in a) and any("generator" in k for k in a) and a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (whole, extended))
    assert (sa["steps"], sa["generations"], sa["final_return"]) == (sb["steps"], sb["generations"], sb["final_return"])


def test_a_run_in_graph_equals_the_run_on_the_vector_env(tmp_path):
    """speed.env_in_graph changes how generations run, not what they compute: the same population,
    generator and returns at the end."""
    from helpers import final_weights

    runs = {}
    for choice in ("true", "false"):
        proc = _train(tmp_path / choice, "total_steps=3000", "eval_every=1000", f"speed.env_in_graph={choice}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert ("one compiled call" in proc.stdout) == (choice == "true"), proc.stdout[-2000:]
        runs[choice] = final_weights(tmp_path / choice), json.loads((tmp_path / choice / "summary.json").read_text())
    (a, sa), (b, sb) = runs["true"], runs["false"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert (sa["steps"], sa["generations"], sa["final_return"]) == (sb["steps"], sb["generations"], sb["final_return"])


def test_evaluate_and_export_the_best_individual(tmp_path):
    from helpers import evaluate

    proc = _train(tmp_path, "total_steps=2000", "eval_every=1000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = evaluate(f"run_dir={tmp_path}", "episodes=2", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "eval" / "latest.json").read_text())
    loaded = tf.saved_model.load(str(tmp_path / "export" / "latest"))
    obs = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    assert loaded(obs).shape == (3,) and result["episodes"] == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {"final_return", "best_return", "steps", "agent", "env", "seed"} <= summary.keys() and summary["agent"] == "ga"
    assert (tmp_path / "tb").is_dir() and "fitness_best" in (tmp_path / "train.csv").read_text().splitlines()[0]


@pytest.mark.slow
def test_ga_solves_cartpole(tmp_path):
    """The preset (50 individuals, the 16-16 policy of conf/agent_network/ga_mlp.yaml, the generation
    in one XLA call) reaches the maximum return, 500, within 40 generations (seeds 0-4 took 18-36)."""
    proc = _train(tmp_path, "agent.population=50", "network.hidden=[16,16]", "total_steps=100000", "eval_every=10000",
                  "eval_episodes=5", "checkpoint.every=0", "logger.tensorboard=false", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from helpers import read_csv

    evals = read_csv(tmp_path / "eval.csv")
    solved = [int(r["generation"]) for r in evals if float(r["return_mean"]) == 500.0]
    assert solved and solved[0] <= 40, [(r["generation"], r["return_mean"]) for r in evals]


# --- CartPole in TensorFlow ------------------------------------------------------------------------

def test_cartpole_in_tensorflow_matches_gymnasium_step_for_step():
    """Random pushes from gymnasium's own start states: the same observations (float32, bit for
    bit), the same terminations, over many episodes."""
    import gymnasium as gym

    from envs.cartpole_tf import cartpole_step, start_states

    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    starts = start_states(seed=7, episodes=30)
    obs, _ = env.reset(seed=7)
    terminations = 0
    for episode in range(30):
        state = tf.constant(starts[episode][None])
        np.testing.assert_array_equal(obs, np.float32(starts[episode]))  # gymnasium's reset drew the same
        done = False
        while not done:
            action = int(rng.integers(2))
            obs, reward, terminated, truncated, _ = env.step(action)
            state, r, term = cartpole_step(state, tf.constant([action]))
            np.testing.assert_array_equal(obs, state.numpy()[0].astype(np.float32))
            assert (bool(term[0]), float(r[0])) == (terminated, reward)
            done = terminated or truncated
            terminations += terminated
        obs, _ = env.reset()
    assert terminations == 30


def test_a_generation_in_graph_scores_as_the_vector_env_does():
    """The whole generation in one compiled call gives every individual the fitness the vector
    env loop gives it (same start states, masking, two episodes each)."""
    from agents.ga import CompiledPopulation
    from envs.cartpole_tf import STATE_DIM, TIME_LIMIT, cartpole_step, start_states
    from envs.factory import make_vector_env
    from training.evolution import generation_in_graph, run_generation

    ga = GA(obs_shape=(4,), network=lambda i, o, **kw: mlp(i, o, hidden=[8], **kw), rng=np.random.default_rng(3),
            population=8, episodes=2, num_actions=2, mutation_std=0.5)
    population = CompiledPopulation(ga)
    envs = make_vector_env("CartPole-v1", 8, seed=0)
    in_graph = generation_in_graph(ga.population_act, cartpole_step, STATE_DIM, TIME_LIMIT, 8)
    for generation in range(3):
        python = run_generation(population, envs, 2, reset_seed=100 + generation)
        fitness, steps, vector_steps = in_graph(start_states(100 + generation, 2))
        np.testing.assert_array_equal(fitness.numpy(), python.fitness)
        assert (int(steps), int(vector_steps)) == (python.steps, python.vector_steps)
        population.evolve(python.fitness)
    envs.close()
    assert in_graph.experimental_get_tracing_count() == 1  # one trace for every generation


def test_wandb_and_tensorboard_get_the_fitness_of_every_generation(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from helpers import read_wandb_log
    from wandb.proto import wandb_internal_pb2

    proc = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={tmp_path}", "agent=ga", "env=cartpole", "agent.population=8",
         "total_steps=2000", "eval_every=1000", "eval_episodes=1", "logger.progress=false", "checkpoint.every=0",
         "logger.wandb=true", "wandb.mode=offline", "wandb.project=tfrl-test"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "WANDB_MODE": "offline"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    generations = json.loads((tmp_path / "summary.json").read_text())["generations"]
    history = []
    for data in read_wandb_log(next((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "history":
            history.append({i.key or "/".join(i.nested_key) for i in rec.history.item})
    wanted = {"train/fitness_best", "train/fitness_mean", "train/fitness_median", "train/generations_per_second"}
    assert sum(wanted <= h for h in history) == generations >= 2
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0}).Reload()  # TF2 scalars are tensors
    assert len(events.Tensors("train/fitness_median")) == generations and events.Tensors("eval/return_mean")
