"""Time per GA generation: the seed experiment's ways (one individual at a time) against the batched
population of agent=ga, on the same population, the same episodes, alternating.

    uv run python benchmarks/ga_generation.py                          # CartPole-v1, 50 individuals
    uv run python benchmarks/ga_generation.py --hidden 16,16 --rounds 7

Ways, each running every individual's episodes from the same start states:
- numpy_per_individual: the seed's way: individual by individual, one gymnasium env, a numpy forward
  pass of that individual's weights per step;
- tf_per_individual: the seed's TensorFlow attempt: the individual's weights set into a Keras model
  (`set_weights`), then a tf.function call per step;
- batched: agent=ga's way (training/evolution.py): all individuals in a gymnasium vector env, one
  compiled call per env step acting for the whole population;
- in_graph, in_graph_xla (CartPole-v1 only): the whole generation as one compiled call, CartPole's
  dynamics in TensorFlow (envs/cartpole_tf.py), in graph mode and compiled by XLA.
The population is first evolved for `--warm` generations (so episodes are long, as a trained
population's are), then frozen. Each round times every way once, in turn; the medians over
rounds are reported, with each way's split of a step into forward and env time, and the env steps
each way ran (they must agree: the same actions from the same weights). Writes JSON.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from training.runtime import prepare_process  # noqa: E402

prepare_process()

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--population", type=int, default=50)
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--hidden", default="16,16", help="the policy's hidden sizes, comma-separated (agent=ga's preset: 16,16)")
    p.add_argument("--warm", type=int, default=10, help="generations evolved before timing")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="TF's inter- and intra-op threads (the envs run on one core)")
    p.add_argument("--out", default=os.path.join(ROOT, "labs", "records", "ga_generation.json"))
    args = p.parse_args(argv)
    try:
        args.hidden = [int(h) for h in args.hidden.split(",") if h]
    except ValueError:
        p.error(f"--hidden takes comma-separated sizes such as 64,64, got {args.hidden!r}")
    if args.population < 2 or args.episodes < 1 or args.rounds < 1 or args.warm < 0 or not args.hidden:
        p.error("--population >= 2, --episodes >= 1, --rounds >= 1, --warm >= 0 and a non-empty --hidden, please")
    return args


class Timed:
    """Seconds spent in forward passes and env steps, and env steps taken."""

    def __init__(self):
        self.forward = self.env = 0.0
        self.steps = 0


def per_individual(individuals, act, load, env, episodes: int, reset_seed: int) -> Timed:
    """The seed's loop: individual after individual, its episodes in one env."""
    t = Timed()
    for weights in individuals:
        load(weights)
        obs, _ = env.reset(seed=reset_seed)
        for _ in range(episodes):
            done = False
            while not done:
                t0 = time.perf_counter()
                action = act(obs)
                t1 = time.perf_counter()
                obs, _, terminated, truncated, _ = env.step(action)
                t.env += time.perf_counter() - t1
                t.forward += t1 - t0
                t.steps += 1
                done = terminated or truncated
            obs, _ = env.reset()
    return t


def main(argv=None) -> dict:
    args = parse_args(argv)
    import gymnasium as gym
    import tensorflow as tf

    from agents.ga import CompiledPopulation
    from agents.ga import GA
    from envs.factory import make_vector_env
    from networks.mlp import mlp
    from networks.numpy_forward import forward_fn
    from training.evolution import run_generation
    from training.seeding import seed_everything
    from training.speed import configure_threads

    configure_threads(args.threads, args.threads)
    rng = seed_everything(args.seed)
    probe = gym.make(args.env)
    obs_dim, space = int(probe.observation_space.shape[0]), probe.action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    network = lambda i, o, **kw: mlp(i, o, hidden=args.hidden, **kw)  # noqa: E731
    kwargs = dict(num_actions=int(space.n)) if discrete else dict(action_low=space.low, action_high=space.high)
    ga = GA(obs_shape=(obs_dim,), network=network, rng=rng, population=args.population, episodes=args.episodes, **kwargs)
    population = CompiledPopulation(ga)
    envs = make_vector_env(args.env, args.population, seed=args.seed)
    for _ in range(args.warm):
        population.evolve(run_generation(population, envs, args.episodes, int(rng.integers(2**31 - 1))).fitness)
    individuals = [ga.individual(p) for p in range(args.population)]
    reset_seed = int(rng.integers(2**31 - 1))

    # the seed's numpy way: the policy network's forward pass in numpy, per individual's weights
    np_forward = forward_fn(ga.policy_network)
    state = {}

    def np_load(weights):
        state["w"] = weights

    def np_act(obs):
        out = np_forward(state["w"], np.asarray(obs, np.float32)[None])[0]
        return int(out.argmax()) if discrete else ga.box.from_unit(out)

    # the seed's TF way: weights set into a Keras model, a tf.function call per step
    model = network(obs_dim, int(space.n) if discrete else ga.box.dim, output_activation=None if discrete else "tanh",
                    name="actor")
    tf_call = tf.function(lambda x: model(x, training=False),
                          input_signature=[tf.TensorSpec([None, obs_dim], tf.float32)])

    def tf_act(obs):
        out = tf_call(np.asarray(obs, np.float32)[None]).numpy()[0]
        return int(out.argmax()) if discrete else ga.box.from_unit(out)

    env = gym.make(args.env)

    def batched() -> Timed:
        r = run_generation(population, envs, args.episodes, reset_seed)
        t = Timed()
        t.forward, t.env, t.steps = r.act_seconds, r.env_seconds, r.steps
        t.vector_steps = r.vector_steps
        return t

    ways = {
        "numpy_per_individual": lambda: per_individual(individuals, np_act, np_load, env, args.episodes, reset_seed),
        "tf_per_individual": lambda: per_individual(individuals, tf_act, model.set_weights, env, args.episodes, reset_seed),
        "batched": batched,
    }
    if args.env == "CartPole-v1":
        from envs.cartpole_tf import STATE_DIM, TIME_LIMIT, cartpole_step, start_states
        from training.evolution import generation_in_graph

        starts = start_states(reset_seed, args.episodes)

        def in_graph(fn):
            def run() -> Timed:
                _, steps, vector_steps = fn(starts)
                t = Timed()
                t.steps, t.vector_steps = int(steps), int(vector_steps)
                return t
            return run

        for name, xla in (("in_graph", False), ("in_graph_xla", True)):
            fn = generation_in_graph(ga.population_act, cartpole_step, STATE_DIM, TIME_LIMIT, args.population, jit_compile=xla)
            ways[name] = in_graph(fn)
    for fn in ways.values():  # warm: traces, first calls
        fn()
    rounds = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, fn in ways.items():
            t0 = time.perf_counter()
            timed = fn()
            rounds[name].append((time.perf_counter() - t0, timed))
    results = {}
    for name, runs in rounds.items():
        seconds = [s for s, _ in runs]
        timed = [t for _, t in runs]
        calls = [getattr(t, "vector_steps", t.steps) for t in timed]
        results[name] = {
            "generation_ms": 1e3 * statistics.median(seconds),
            "env_steps": timed[0].steps,
            "forward_us_per_call": 1e6 * statistics.median(t.forward / c for t, c in zip(timed, calls)),
            "env_us_per_call": 1e6 * statistics.median(t.env / c for t, c in zip(timed, calls)),
            "forward_ms_per_generation": 1e3 * statistics.median(t.forward for t in timed),
            "env_ms_per_generation": 1e3 * statistics.median(t.env for t in timed),
        }
    base = results["numpy_per_individual"]["generation_ms"]
    for r in results.values():
        r["speedup_vs_numpy_per_individual"] = base / r["generation_ms"]
    steps = {r["env_steps"] for r in results.values()}
    report = {
        "command": "uv run python benchmarks/ga_generation.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "env": args.env, "population": args.population, "episodes": args.episodes, "hidden": args.hidden,
        "rounds": args.rounds, "threads": args.threads, "machine": f"{platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores", "same_episodes": len(steps) == 1,
        "mean_episode_length": results["batched"]["env_steps"] / (args.population * args.episodes),
        "ways": results,
    }
    print(f"{args.env}, {args.population} individuals x {args.episodes} episode(s), policy {obs_dim}-"
          f"{'-'.join(map(str, args.hidden))}, mean episode {report['mean_episode_length']:.0f} steps, "
          f"medians of {args.rounds} alternating rounds")
    print(f"{'way':24s} {'generation ms':>14s} {'x numpy':>8s} {'forward us/call':>16s} {'env us/call':>12s} {'env steps':>10s}")
    for name, r in results.items():
        print(f"{name:24s} {r['generation_ms']:14.1f} {r['speedup_vs_numpy_per_individual']:8.2f} "
              f"{r['forward_us_per_call']:16.1f} {r['env_us_per_call']:12.1f} {r['env_steps']:10d}")
    if not report["same_episodes"]:
        print(f"warning: the ways ran different numbers of env steps {sorted(steps)}: float rounding changed an action")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"written: {args.out}")
    return report


if __name__ == "__main__":
    main()
