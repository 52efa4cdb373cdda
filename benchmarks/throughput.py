"""Throughput of every part of a training step, and of the whole loop, in eager, graph and XLA mode.

    uv run python benchmarks/throughput.py agent=td3 env=ant
    uv run python benchmarks/throughput.py agent=dqn env=cartpole network.hidden=[64,64] batch_size=64 \\
        updates_per_step=0.25 train_every=4
    uv run python benchmarks/throughput.py agent=td3 env=ant bench.modes=[graph] speed.fuse_updates=false

Configured like train.py (conf/throughput.yaml adds a `bench` section to the run config), so any
agent, env, network, buffer and cadence works. Each figure is the median of `bench.repeats`
repetitions. Measured: env step (per transition), acting (one observation and a batch; numpy fast
path, the TF path, and a plain numpy forward pass of the same weights as the floor), buffer add and
sample, one update, K fused updates, and the whole loop (training.loop.train, updates on) in env
steps/s. The loop's overhead is measured inside the loop: the loop's calls of env step, act, buffer
add and sample, and update are timed where they happen, and `loop_overhead_in_loop` is the loop's
time per interval over the sum of those, minus 1 (its own bookkeeping). `loop_vs_isolated_parts`
compares the loop with the sum of the parts timed one by one above, at the run's cadence; it also
holds what interleaving costs (caches, TF's thread pool waking) and the machine's drift between
the two measurements. Prints a table and writes JSON.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from training.runtime import prepare_process  # noqa: E402

prepare_process()  # before TensorFlow or Keras is imported anywhere

import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from typing import Callable  # noqa: E402

import hydra  # noqa: E402
import numpy as np  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402


def per_call(fn: Callable[[], object], number: int, repeats: int) -> float:
    """Median over `repeats` of the seconds per call of `fn`, timed over `number` calls."""
    fn()  # warm: first-call costs (tracing, allocation) are not throughput
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def updates_per_phase(run: DictConfig) -> int:
    """Updates the loop runs together at the run's cadence (fused into one call when more than
    one): one phase every max(train_every, num_envs) env steps."""
    return int(max(int(run.train_every), int(run.num_envs)) * float(run.updates_per_step))


def random_transitions(envs, n: int):
    """n transitions from real env steps with random actions, as the loop adds them."""
    from envs.factory import transition_next_obs

    obs, _ = envs.reset(seed=0)
    out = []
    for _ in range(max(1, n // envs.num_envs)):
        action = envs.action_space.sample()
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        out.append((obs, action, reward, transition_next_obs(next_obs, infos, terminated | truncated), terminated, truncated))
        obs = next_obs
    return out


class _PartTimer:
    """Wraps the calls the loop makes (env step, act, buffer add and sample, update) to add up
    the time spent in each, so the loop's own overhead is measured inside the same run. A part's
    time excludes the parts it calls: with `speed.steps_per_call`, the driver's compiled call runs the
    env steps, acting and sampling, and "update" is the rest of that call."""

    def __init__(self):
        self.spent: dict[str, float] = {}
        self._nested: list[float] = []  # per open call: time spent in the parts it called

    def wrap(self, obj, method: str, part: str) -> None:
        fn = getattr(obj, method)
        self.spent.setdefault(part, 0.0)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            self._nested.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                self.spent[part] += elapsed - self._nested.pop()
                if self._nested:
                    self._nested[-1] += elapsed

        setattr(obj, method, timed)


class _Records:
    """A logger that keeps, at every update record (one per timed interval), the loop's steps/s,
    the time, and the time spent so far in each part."""

    def __init__(self, timer: _PartTimer):
        self.timer = timer
        self.rows: list[tuple[int, dict, float, dict]] = []

    def log(self, kind, step, metrics):
        if kind == "update":
            self.rows.append((step, metrics, time.perf_counter(), dict(self.timer.spent)))

    def close(self):
        pass


def run_config(cfg: DictConfig, mode: str) -> DictConfig:
    run = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("bench",)])
    run.speed.compile = mode
    OmegaConf.resolve(run)
    return run


def timed_settings(settings, warmup: int, steps: int, intervals: int):
    """A run's loop settings for timing: `warmup` random steps, then `intervals` + 1 intervals of
    `steps` steps each ending in an update record (the first holds the tracing and is not timed);
    no evaluation and no checkpoint in between."""
    return replace(settings, learning_starts=warmup, total_steps=warmup + steps * (intervals + 1), log_every=steps,
                   eval_every=10**12, eval_episodes=1, checkpoint_every=0, progress=False)


def timed_intervals(records: "_Records", warmup: int, steps: int, intervals: int) -> list:
    """(start row, end row) of the timed intervals of a loop run with `timed_settings`: from the
    end of the interval that holds the tracing (the record at warmup + steps) on."""
    rows = [r for r in records.rows if r[0] >= warmup + steps][: intervals + 1]
    assert len(rows) >= 2, records.rows
    return list(zip(rows, rows[1:]))


def interval_rate(intervals: list) -> float:
    """Median env steps/s over (start row, end row) intervals of `_Records`."""
    return statistics.median((s1 - s0) / (t1 - t0) for (s0, _, t0, _), (s1, _, t1, _) in intervals)


def measure_loop(cfg: DictConfig, mode: str, bench: DictConfig, time_parts: bool = True) -> dict:
    """Env steps/s of training.loop.train with updates on: the median over `repeats` intervals of
    `loop_steps` steps, after the warm-up and one interval that holds the update's tracing. With
    `time_parts`, also where a step's time goes; the wrappers that time the parts cost a few us
    per call, so the side-by-side with SB3 measures the loop without them."""
    from training.builder import build_run
    from training.loop import train

    run = run_config(cfg, mode)
    parts = build_run(run)
    steps = int(bench.loop_steps) // (10 if mode == "eager" else 1)
    steps = max(steps - steps % parts.envs.num_envs, parts.envs.num_envs)
    repeats = int(bench.repeats)
    warmup = int(bench.warmup)
    settings = timed_settings(parts.settings, warmup, steps, repeats)
    timer = _PartTimer()
    timed = [(parts.envs, "step", "env_step"), (parts.learner, "act", "act"), (parts.learner, "update", "update"),
             (parts.buffer, "add", "buffer_add"), (parts.buffer, "sample_batches", "sample"),
             (parts.buffer, "sample_sequences", "sample")]
    if parts.driver is not None:
        timed.append((parts.driver, "run", "update"))
    for obj, method, part in timed if time_parts else []:
        timer.wrap(obj, method, part)
    records = _Records(timer)
    train(parts.learner, parts.buffer, parts.envs, parts.eval_env, settings, records, driver=parts.driver)
    parts.close()
    intervals = timed_intervals(records, warmup, steps, repeats)
    rate = interval_rate(intervals)
    out = {"loop_steps_per_s": rate, "loop_us_per_step": 1e6 / rate}
    if not time_parts:
        return out
    overheads, shares = [], []
    for (_, _, t0, spent0), (_, _, t1, spent1) in intervals:
        loop = t1 - t0
        in_parts = {k: spent1[k] - spent0.get(k, 0.0) for k in spent1}
        overheads.append(loop / sum(in_parts.values()) - 1.0)
        shares.append({k: v / loop for k, v in in_parts.items()})
    out["loop_overhead_in_loop"] = statistics.median(overheads)
    for k in shares[0]:  # where a step's time goes, inside the loop
        out[f"loop_share_{k}"] = statistics.median(s[k] for s in shares)
    return out


def measure_parts(cfg: DictConfig, mode: str, bench: DictConfig, only_update: bool = False) -> dict:
    """Every part of a step timed on its own; with `only_update`, only sampling and the update
    (one per call and fused), after filling the buffer."""
    from training.builder import build_run

    run = run_config(cfg, mode)
    parts = build_run(run)
    agent, buffer, envs = parts.learner, parts.buffer, parts.envs
    reps, B = int(bench.repeats), int(run.batch_size)
    n_envs = envs.num_envs
    out: dict[str, float] = {}

    transitions = random_transitions(envs, 2000)
    envs.reset(seed=1)
    i = iter(range(10**9))
    if not only_update:
        out["env_step_us"] = 1e6 * per_call(lambda: envs.step(envs.action_space.sample()), 200, reps) / n_envs
        obs_batch = np.concatenate([t[0] for t in transitions])[:256].astype(np.float32)
        one = obs_batch[:1]
        out["act_one_us"] = 1e6 * per_call(lambda: agent.act(one, explore=True), 2000, reps)
        out["act_one_greedy_us"] = 1e6 * per_call(lambda: agent.act(one, explore=False), 2000, reps)
        out["act_batch256_us"] = 1e6 * per_call(lambda: agent.act(obs_batch, explore=False), 200, reps)
        if n_envs > 1:  # what the loop acts on: one observation per env
            out[f"act_{n_envs}_us"] = 1e6 * per_call(lambda: agent.act(obs_batch[:n_envs], explore=True), 2000, reps)
        out["buffer_add_us"] = 1e6 * per_call(lambda: buffer.add(*transitions[next(i) % len(transitions)]), 5000, reps) / n_envs
    while len(buffer) < min(int(bench.buffer_fill), buffer.capacity):
        buffer.add(*transitions[next(i) % len(transitions)])
    out["buffer_rows"] = len(buffer)
    out["sample_us"] = 1e6 * per_call(lambda: buffer.sample(B), 500, reps)
    out.update(measure_update(agent, buffer, run, bench, mode))
    parts.close()
    return out


def measure_update(agent, buffer, run: DictConfig, bench: DictConfig, mode: str) -> dict:
    """One update per call, and K fused into one call (K = `bench.fuse`, and the run's own
    cadence when it fuses another number), in ms per update, on batches of the filled buffer;
    and the sampling of K batches together."""
    reps, B, K = int(bench.repeats), int(run.batch_size), int(bench.fuse)
    draw = lambda n: agent.replay.draw(buffer, B, n)  # noqa: E731  (MR.Q's: batches and runs)
    batch = draw(1)
    number = 5 if mode == "eager" else 50
    out = {"update_ms": 1e3 * per_call(lambda: agent.update(batch), number, reps)}
    for n in sorted({K, updates_per_phase(run) if run.speed.fuse_updates else 1} - {1}):
        stacked = draw(n)
        out[f"fused_x{n}_update_ms"] = 1e3 * per_call(lambda: agent.update(stacked), max(1, number // n), reps) / n
        out[f"sample_x{n}_us"] = 1e6 * per_call(lambda: draw(n), max(1, 800 // n), reps)
    if mode == "graph":
        out["update_traces"] = agent.update_trace_count
    return out


def acting_floor(cfg: DictConfig, bench: DictConfig) -> dict:
    """Acting against its floor (the numpy forward pass of the same weights, nothing else) and the
    TF path (`speed.numpy_acting=false`)."""
    from networks.numpy_forward import forward_fn
    from training.builder import build_run

    run = run_config(cfg, "graph")
    run.speed.numpy_acting = False
    parts = build_run(run, with_buffer=False)
    agent, reps = parts.learner, int(bench.repeats)
    net = agent.agent.acting.network
    forward, weights = forward_fn(net), [np.array(w) for w in net.get_weights()]
    obs, _ = parts.eval_env.reset(seed=0)
    one = np.asarray(obs, np.float32)[None]
    out = {
        "numpy_forward_one_us": 1e6 * per_call(lambda: forward(weights, one), 2000, reps),
        "act_one_tf_function_us": 1e6 * per_call(lambda: agent.act(one, explore=False), 500, reps),
    }
    parts.close()
    return out


def table(results: dict, modes: list[str]) -> str:
    keys = list(dict.fromkeys(k for m in modes for k in results[m]))  # in the order measured
    lines = ["| measure | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for k in keys:
        cells = [f"{results[m][k]:.4g}" if k in results[m] else "" for m in modes]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cadence_parts_us(r: dict, run: DictConfig) -> float:
    """Sum of the parts timed one by one, per env step at the run's cadence."""
    n_envs, n = int(run.num_envs), updates_per_phase(run)
    if n > 1 and run.speed.fuse_updates:
        update_us = 1e3 * r[f"fused_x{n}_update_ms"] + r[f"sample_x{n}_us"] / n
    else:
        update_us = 1e3 * r["update_ms"] + r["sample_us"]
    act_us = r["act_one_us"] if n_envs == 1 else r[f"act_{n_envs}_us"] / n_envs
    return r["env_step_us"] + act_us + r["buffer_add_us"] + float(run.updates_per_step) * update_us


@hydra.main(version_base="1.3", config_path="../conf", config_name="throughput")
def main(cfg: DictConfig) -> None:
    import tensorflow as tf
    from training.builder import network_widths

    bench = cfg.bench
    modes = list(bench.modes)
    results: dict[str, dict] = {}
    only = bench.only
    if only not in (None, "loop", "update"):
        sys.exit(f"error: bench.only={only!r} is not a measurement; use bench.only=loop (the whole loop), "
                 "bench.only=update (one update and K fused), or leave it null to measure everything.")
    floor = acting_floor(cfg, bench) if only is None else {}
    for mode in modes:
        r = {} if only == "loop" else measure_parts(cfg, mode, bench, only_update=only == "update")
        if only != "update":
            r.update(measure_loop(cfg, mode, bench, time_parts=only is None))
            print(f"{mode}: {r['loop_steps_per_s']:.1f} env steps/s", flush=True)
        if only is None:
            r["parts_us_per_step"] = cadence_parts_us(r, run_config(cfg, mode))
            r["loop_vs_isolated_parts"] = r["loop_us_per_step"] / r["parts_us_per_step"] - 1.0
        results[mode] = r
    if "eager" in results and "graph" in results and "update_ms" in results["graph"]:
        floor["graph_vs_eager_update"] = results["eager"]["update_ms"] / results["graph"]["update_ms"]
    if floor.get("numpy_forward_one_us") and "graph" in results and "act_one_greedy_us" in results["graph"]:
        floor["act_vs_numpy_forward"] = results["graph"]["act_one_greedy_us"] / floor["numpy_forward_one_us"]
        floor["tf_function_vs_numpy_forward"] = floor["act_one_tf_function_us"] / floor["numpy_forward_one_us"]

    choices = HydraConfig.get().runtime.choices
    name = f"{choices.get('agent')}_{choices.get('env')}"
    network = f"{choices.get('network')} {list(network_widths(cfg.network) or [])}"
    print(f"\n{name}: {cfg.env.id}, network {network}, batch {cfg.batch_size}, "
          f"{cfg.updates_per_step} updates/step, train_every {cfg.train_every}, num_envs {cfg.num_envs}, "
          f"fuse_updates {cfg.speed.fuse_updates}; median of {bench.repeats}")
    print(table(results, modes))
    for k, v in floor.items():
        print(f"{k}: {v:.4g}")
    report = {
        "name": name,
        "overrides": list(HydraConfig.get().overrides.task),
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "tensorflow": tf.__version__, "python": platform.python_version()},
        "results": results,
        "acting": floor,
    }
    path = bench.output or os.path.join(ROOT, "labs", "records", f"throughput_{name}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
