"""Small helpers the tests share: batches for agents, in-process runs, train.py, resume and
evaluate.py as subprocesses, and readers of what a run wrote."""
import csv
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np

from buffers.types import Batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compiled(agent, compile="graph", **speed):
    """`agent` with its update compiled, as the loop drives it (speed settings as keywords)."""
    from agents.compiled import CompiledAgent

    return CompiledAgent(agent, compile=compile, **speed)


def stack(batches) -> Batch:
    """Batches stacked on a leading axis, as the learner takes them."""
    return Batch(*(np.stack(xs) for xs in zip(*batches)))


def random_batch(rng, obs_dim: int, low, high, n: int = 32) -> Batch:
    """A batch of random transitions with continuous actions in [low, high], one in ten terminal."""
    return Batch(
        obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        action=rng.uniform(low, high, size=(n, len(np.atleast_1d(low)))).astype(np.float32),
        reward=rng.normal(size=n).astype(np.float32),
        next_obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        discount=(0.99 * (rng.random(n) > 0.1)).astype(np.float32),
        weight=np.ones(n, np.float32),
    )


def one(batch) -> Batch:
    """One batch as the learner takes it: K = 1 stacked batches."""
    return stack([batch])


class Records:
    """A logger that keeps every record in memory: `rows[kind]` is a list of (step, metrics)."""

    def __init__(self):
        self.rows: dict[str, list] = {}

    def log(self, kind, step, metrics):
        self.rows.setdefault(kind, []).append((step, dict(metrics)))

    def close(self):
        pass


def run_loop(cfg, records: Records | None = None, before_train=None):
    """Train the composed `cfg` in this process; (summary, run), its envs closed. `records` (if
    given) receives the loop's records; `before_train(run)` is called on the built run first."""
    from omegaconf import OmegaConf

    from training.builder import build_run
    from training.families import family_of
    from training.loggers import MultiLogger
    from training.session import LoopHooks

    OmegaConf.resolve(cfg)
    run = build_run(cfg)
    if before_train is not None:
        before_train(run)
    try:
        family = family_of(cfg, run)
        summary = family.train(MultiLogger([records] if records is not None else []), family.initial_state(),
                               LoopHooks())
    finally:
        run.close()
    return summary, run


def run_population(cfg):
    """Train the composed population `cfg` (agent=ga) in this process; (summary, run, train records
    as (step, metrics)), its envs closed."""
    class Records:
        def __init__(self):
            self.rows = []

        def log(self, kind, step, metrics):
            if kind == "train":
                self.rows.append((step, metrics))

        def close(self):
            pass

    records = Records()
    summary, run = run_loop(cfg, records)
    return summary, run, records.rows


def in_process(capsys, script: str, *args: str):
    """`python <script> *args` (train.py or evaluate.py) run through the script's own entry in this
    process, without importing TensorFlow again: a CompletedProcess with its exit code and what it
    printed, read through pytest's `capsys`. For the many refused commands; a subprocess stays the
    test of a whole command line and of a run that trains."""
    import importlib

    from absl import logging as absl_logging
    from hydra.core.global_hydra import GlobalHydra

    module = importlib.import_module(script.removesuffix(".py"))
    # Hydra's logging setup closes every live handler's stream unless it is the current sys.stderr
    # or stdout. absl's handler took sys.stderr when TensorFlow was imported, which under pytest may
    # be pytest's own capture file (a test module importing TF at collection): closing it breaks the
    # capture of every test after. Point it at the process's stderr, which is never closed.
    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
    capsys.readouterr()
    code, argv = 0, sys.argv
    sys.argv = [script, *args]
    try:
        if script == "train.py":  # what its `__main__` does before Hydra starts
            sys.argv = [script, *module.read_command_line(list(args))]
        module.main()
    except module.ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        code = 2
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    finally:
        sys.argv = argv
        GlobalHydra.instance().clear()
    out = capsys.readouterr()
    return subprocess.CompletedProcess([script, *args], code, out.out, out.err)


def train_in_process(capsys, *args: str):
    return in_process(capsys, "train.py", *args)


class InProcess:
    """train.py, a resume and evaluate.py through their own entries in this process (the `cli`
    fixture): for commands that are refused before anything trains."""

    def __init__(self, capsys):
        self.capsys = capsys

    def train(self, run_dir, *overrides):
        return in_process(self.capsys, "train.py", f"hydra.run.dir={run_dir}", *overrides)

    def resume(self, run_dir, *overrides):
        return in_process(self.capsys, "train.py", f"resume={run_dir}", *overrides)

    def evaluate(self, *args):
        return in_process(self.capsys, "evaluate.py", *args)


def with_tests_importable() -> dict:
    """The environment of a train.py subprocess that can import tests/' modules (signalling_env)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.join(ROOT, "tests"),
                                                                       os.environ.get("PYTHONPATH")]))}


def resume(run_dir, *overrides):
    cmd = [sys.executable, "train.py", f"resume={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=with_tests_importable())


def evaluate(*args):
    cmd = [sys.executable, "evaluate.py", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def extended_run_ends_as_the_whole(train, tmp_path, steps: int) -> tuple[dict, dict]:
    """`train(run_dir, "total_steps=N")` run whole to `steps`, and to half of them then extended
    from its checkpoint: both succeed and end with the same weights, every one of them bit for
    bit. Returns the run dirs (whole, extended) and the whole run's final weights."""
    whole, extended = tmp_path / "whole", tmp_path / "extended"
    for run_dir, total in ((whole, steps), (extended, steps // 2)):
        proc = train(run_dir, f"total_steps={total}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = resume(extended, f"total_steps={steps}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = final_weights(whole), final_weights(extended)
    assert a and a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    return (whole, extended), a


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def final_weights(run_dir):
    """The actor and critic weights in the final checkpoint (training.checkpoints.latest_values)."""
    from training.checkpoints import latest_values

    return latest_values(str(run_dir))


# A run of about half a minute on one CPU, for the cluster tests (SLURM, Ray): a signal or a dead
# node lands after its first checkpoint (step 2000), and the job, started again, must end with the
# weights of the same run uninterrupted.
LONG_RUN = ["total_steps=4000", "learning_starts=500", "eval_every=2000", "eval_episodes=1", "checkpoint.every=1000",
            "network.hidden=[64,64]", "deterministic=true", "logger.progress=false", "speed.threads.inter_op=1",
            "speed.threads.intra_op=1"]


def checkpoint_steps(run_dir) -> list[int]:
    """The steps of the run's complete checkpoints (not one being written)."""
    from training.checkpoints import list_checkpoints

    return list(list_checkpoints(str(run_dir)))


def session_dir(tmp_path_factory):
    """The test session's temp dir, shared by its xdist workers (each worker's own is a dir in it;
    without xdist it is the session's own: its parent holds every earlier session's too)."""
    basetemp = tmp_path_factory.getbasetemp()
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def uninterrupted_long_run(tmp_path_factory) -> dict:
    """The final weights of LONG_RUN (seed 0) run whole, without a launcher: made once per test
    session, whichever xdist worker asks first (a lock in the session's shared temp dir)."""
    import fcntl

    shared = session_dir(tmp_path_factory)
    run_dir = shared / "uninterrupted_long_run"
    with open(shared / "uninterrupted_long_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (run_dir / "summary.json").exists():
            proc = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={run_dir}", "seed=0", *LONG_RUN], cwd=ROOT,
                                  capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stderr[-3000:]
    return final_weights(run_dir)


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def read_wandb_log(path):
    """The records of a W&B transaction log (`run-*.wandb`): a 7-byte ':W&B' header, then
    LevelDB-style 32 KiB blocks of [crc32c:4][length:2][type:1][data] chunks (1 full, 2 first,
    3 middle, 4 last). wandb 0.31 no longer ships a Python reader for it."""
    import struct

    data = open(path, "rb").read()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
        elif kind == 0 and length == 0:
            pos += block - pos % block if pos % block else 0
    return records


# A short deterministic TD3 run on Pendulum: 200 random steps, then 400 steps with updates.
RUN = ["env=pendulum", "total_steps=600", "learning_starts=200", "eval_every=200", "eval_episodes=2",
       "batch_size=64", "network.hidden=[32,32]", "logger.every=100", "checkpoint.every=200", "checkpoint.keep=2", "deterministic=true",
       "logger.trace_graph=true", "logger.progress=false"]


def train(run_dir, *overrides, timeout=600):
    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def fill(buf, n, terminated_at=(), truncated_at=()):
    for i in range(n):
        buf.add([[float(i)]], [[0.0]], [float(i + 1)], [[i + 0.5]], [i in terminated_at], [i in truncated_at])


def two_env_stream(buf):
    """Six adds of two envs; the transition of env e at time t has obs 10e + t (action its
    negative, reward obs, next_obs obs + 0.5). Env 0 terminates at t=3, env 1 is cut by a time
    limit at t=2; both go on with new episodes."""
    for t in range(6):
        v = np.array([t, 10 + t], np.float32)
        buf.add(v[:, None], -v[:, None], v, v[:, None] + 0.5, [t == 3, False], [False, t == 2])


class Scripted(gym.Env):
    """A stub env that plays a script: its reset gives frames[0], its i-th step frames[i] and
    rewards[i - 1], so what a wrapper makes of them is known by hand."""

    metadata = {"render_modes": []}

    def __init__(self, frames, rewards=None):
        self.frames = [np.asarray(f, np.uint8) for f in frames]
        self.rewards = list(rewards) if rewards is not None else [0.0] * (len(self.frames) - 1)
        self.observation_space = gym.spaces.Box(0, 255, self.frames[0].shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.frames[0], {}

    def step(self, action):
        self.t += 1
        return self.frames[min(self.t, len(self.frames) - 1)], self.rewards[self.t - 1], False, False, {}
