"""The MR.Q author's own PyTorch code (github.com/facebookresearch/MRQ's `MRQ.Agent`, its
hyper-parameters unchanged), trained by the loop of the author's main.py (`OnlineExperiment.run`) on
the env and run length of the train.py run that the same overrides compose, and written as a run
directory that aggregate.py reads: the reference check of tfrl's MR.Q. With `agent=drq`, the same for
DR.Q's authors' code (github.com/dmksjfl/DR.Q's `DRQ.Agent`, MR.Q's code base with DR.Q's changes, whose
main.py runs the same loop). Runs in SB3's venv (`bash benchmarks/setup_sb3.sh`) on the authors' files
that `bash benchmarks/setup_author.sh mrq` (or `drq`) copies into benchmarks/.mrq-ref (.drq-ref):

    benchmarks/.venv-sb3/bin/python benchmarks/mrq_reference.py agent=mrq env=hopper seed=0 total_steps=100000 \\
        mrq_author.threads=1 hydra.run.dir=<dir>
    benchmarks/.venv-sb3/bin/python benchmarks/mrq_reference.py agent=drq env=hopper env.id=Hopper-v4 ...
    uv run python train.py agent=mrq env=hopper seed=0 total_steps=100000
    uv run python aggregate.py <the run dirs of both> --by implementation=tfrl

From the composed config: env.id (and its time limits and kwargs, as sb3_learning.py makes the env),
seed, total_steps, eval_every, eval_episodes, and learning_starts as the author's
`buffer_size_before_training`. Everything else is the author's `Hyperparameters()` whatever the
agent, network and buffer groups say. Vector observations only: the author's pixel preprocessing
(its Atari and DMC wrappers) is not reproduced here.
The author's loop: random actions until the buffer holds learning_starts transitions, then the
exploring policy; every transition added with its termination and truncation apart; `agent.train()`
after every step. The evaluation is sb3_learning.py's (training/evaluation.py's: `eval_episodes`
episodes at step 0, every `eval_every` steps and at the end, on an env whose first reset is seeded
with seed + 100, into eval.csv with train.py's columns), acting with the author's evaluation policy
(`select_action(use_exploration=False)`).

Runs of 100k steps outlast a working session here, so the run saves the author's agent, optimizers
and buffer (`Agent.save`) at the first episode end after every `mrq_author.checkpoint_every` steps,
into <run dir>/author_checkpoint. The same command with the same `hydra.run.dir` continues from
there: the agent as saved, numpy's and torch's random streams as saved, and a new episode (the
training env reset with seed + step). A continued run does not repeat the uninterrupted one exactly:
that is train.py's promise, not the author's.
`mrq_author.threads=N` sets torch's intra-op threads (null: torch's default).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# agent choice -> setup_author.sh's copy of the authors' files, and their agent's module
AUTHORS = {"mrq": (os.path.join(ROOT, "benchmarks", ".mrq-ref"), "MRQ"),
           "drq": (os.path.join(ROOT, "benchmarks", ".drq-ref"), "DRQ")}
REF = AUTHORS["mrq"][0]
sys.path.insert(0, ROOT)  # conf/config.yaml's Hydra callbacks live in training/callbacks.py

import hydra  # noqa: E402
import numpy as np  # noqa: E402
from hydra.core.config_store import ConfigStore  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from benchmarks.sb3_learning import EvalLog, finish, make_env, refuse  # noqa: E402

# train.py's config and this script's keys, kept here rather than in conf/
ConfigStore.instance().store(name="mrq_reference", node={
    "defaults": ["config", "_self_"],
    # aggregate.py --by implementation=tfrl tells these runs from train.py's (agent=drq: drq-author)
    "implementation": "mrq-author",
    "mrq_author": {"threads": None,  # torch's intra-op threads; null = torch's default (one per core)
                   "checkpoint_every": 10000},  # env steps between saves of the author's agent and buffer
})
CHECKPOINT = "author_checkpoint"


def author_mrq(which: str = "mrq"):
    """The authors' agent module (MRQ, or DR.Q's DRQ) from its copy and the commit it was copied at;
    None if absent. One per process: both import their neighbours as `buffer`, `models`, `utils`."""
    import importlib

    ref, module = AUTHORS[which]
    if not os.path.isfile(os.path.join(ref, f"{module}.py")):
        return None, None
    sys.path.insert(0, ref)
    with open(os.path.join(ref, "COMMIT")) as f:
        return importlib.import_module(module), f.read().strip()


class NoWriter:
    """The TensorBoard writer DR.Q's `train(writer)` logs a few scalars to: not kept here (eval.csv is)."""

    def add_scalar(self, *args, **kwargs) -> None:
        pass


class MRQPolicy:
    """The author's evaluation policy behind the Agent protocol's `act`, for training/evaluation.py."""

    def __init__(self, agent):
        self.agent = agent

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        return np.asarray(self.agent.select_action(np.asarray(obs[0]), use_exploration=explore))[None]


def save(run_dir: str, agent, t: int, wall: float, env) -> None:
    """The author's agent and buffer, step t, the wall time so far and the random streams, replacing
    the previous save only once this one is whole."""
    import torch

    final, tmp = os.path.join(run_dir, CHECKPOINT), os.path.join(run_dir, CHECKPOINT + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    agent.save(tmp)
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    np.save(os.path.join(tmp, "torch_rng.npy"), torch.get_rng_state().numpy())
    with open(os.path.join(tmp, "progress.json"), "w") as f:
        json.dump({"t": t, "wall_time": wall, "np_random": [kind, keys.tolist(), pos, has_gauss, cached],
                   "action_space": env.action_space.np_random.bit_generator.state}, f)
    old = final + ".old"
    if os.path.exists(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def load(run_dir: str, agent, env) -> tuple[int, float]:
    """Restore the save in run_dir, if any, into agent and the random streams: (step, wall time so far)."""
    import torch

    ckpt = os.path.join(run_dir, CHECKPOINT)
    if not os.path.isfile(os.path.join(ckpt, "progress.json")):
        return 0, 0.0
    agent.load(ckpt)
    with open(os.path.join(ckpt, "progress.json")) as f:
        progress = json.load(f)
    kind, keys, pos, has_gauss, cached = progress["np_random"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.from_numpy(np.load(os.path.join(ckpt, "torch_rng.npy"))))
    env.action_space.np_random.bit_generator.state = progress["action_space"]
    print(f"continuing from the author's agent saved at step {progress['t']}", flush=True)
    return int(progress["t"]), float(progress["wall_time"])


def author_agent(MRQ, env, seed: int, learning_starts: int, history: int = 1):
    """The author's agent for `env` as main.py makes it (the author's hyper-parameters but
    `buffer_size_before_training`), on the CPU, with torch's, numpy's and the action space's random
    streams seeded. Image observations (C, H, W) make it a pixel agent, their channels `history`
    frames stacked, as the author's Atari and DMC preprocessing give them."""
    import torch

    if not torch.cuda.is_available():
        # the author's buffer asks CUDA how much memory it has to choose where its arrays live; without
        # CUDA they live on the CPU, where the agent is
        torch.cuda.mem_get_info = lambda *_: (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),) * 2
    env.action_space.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)
    discrete = hasattr(env.action_space, "n")
    shape = env.observation_space.shape
    pixels = len(shape) == 3
    return MRQ.Agent((shape[0] // history, *shape[1:]) if pixels else shape,
                     int(env.action_space.n) if discrete else env.action_space.shape[0],
                     1.0 if discrete else float(env.action_space.high[0]), pixels, discrete, torch.device("cpu"),
                     history, {"buffer_size_before_training": learning_starts})


def author_step(agent, env, state):
    """One step of the author's loop: the exploring policy's action (a random one until the buffer
    holds learning_starts transitions), stored with termination and truncation apart, then
    `agent.train()`; (the next state, whether the episode ended). A random discrete action is
    stored as a Python int: the author's buffer one-hot encodes ints only, and stores gymnasium
    1.x's np.int64 sample a as the vector (a, a, ..., a) (docs/algorithms.md, MR.Q)."""
    action = agent.select_action(np.array(state))
    if action is None:
        action = env.action_space.sample()
        action = int(action) if agent.discrete else action
    next_state, reward, terminated, truncated, _ = env.step(action)
    agent.replay_buffer.add(state, action, next_state, reward, terminated, truncated)
    agent.train(NoWriter()) if agent.name == "DR.Q" else agent.train()
    return next_state, terminated or truncated


def train(cfg: DictConfig, run_dir: str, MRQ, commit: str, which: str = "mrq") -> dict:
    """Train the authors' MR.Q (or DR.Q) as main.py's `OnlineExperiment.run` does, evaluating into
    run_dir/eval.csv."""
    import torch

    if cfg.mrq_author.threads:
        torch.set_num_threads(int(cfg.mrq_author.threads))
    seed = int(cfg.seed)
    env, eval_env = make_env(cfg), make_env(cfg, eval=True)
    total, every, learning_starts = int(cfg.total_steps), int(cfg.eval_every), int(cfg.learning_starts)
    agent = author_agent(MRQ, env, seed, learning_starts)
    start, wall_before = load(run_dir, agent, env)
    policy = MRQPolicy(agent)
    ckpt_every = int(cfg.mrq_author.checkpoint_every)
    next_ckpt = (start // ckpt_every + 1) * ckpt_every if ckpt_every > 0 else None
    with EvalLog(run_dir, policy, eval_env, cfg, resume_at=start, wall_before=wall_before) as log:
        state, _ = env.reset(seed=seed + start)
        for t in range(start, total):
            if t % every == 0:
                log.record(t)
            state, ended = author_step(agent, env, state)
            if ended:
                state, _ = env.reset()
                if next_ckpt is not None and t + 1 >= next_ckpt and t + 1 < total:
                    save(run_dir, agent, t + 1, time.perf_counter() - log.t0, env)
                    next_ckpt = ((t + 1) // ckpt_every + 1) * ckpt_every
        log.record(total)
    return {**log.summary(total), "implementation": f"{which}-author", "agent": which, "env": cfg.env.id,
            f"{which}_settings": {"commit": commit, "updates": agent.training_steps, "continued_from": start,
                             "hyperparameters": dataclasses.asdict(agent.hp)},
            "torch_threads": torch.get_num_threads()}


@hydra.main(version_base="1.3", config_path="../conf", config_name="mrq_reference")
def main(cfg: DictConfig) -> None:
    run_dir = HydraConfig.get().runtime.output_dir
    which = HydraConfig.get().runtime.choices.get("agent")
    if which not in AUTHORS:
        refuse(run_dir, f"agent={which}: this runs the authors' MR.Q (agent=mrq) or DR.Q (agent=drq) code")
    if which != "mrq" and cfg.implementation == "mrq-author":  # the label aggregate.py groups these runs by
        saved = os.path.join(run_dir, ".hydra", "config.yaml")
        if os.path.exists(saved):
            record = OmegaConf.load(saved)
            record.implementation = f"{which}-author"
            OmegaConf.save(record, saved)
    MRQ, commit = author_mrq(which)
    if MRQ is None:
        repo = {"mrq": "facebookresearch/MRQ", "drq": "dmksjfl/DR.Q"}[which]
        refuse(run_dir, f"the authors' {which} is not in {AUTHORS[which][0]}: run `bash benchmarks/setup_author.sh "
                        f"{which}` (SRC=<a clone of {repo}> without network).")
    finish(run_dir, train(cfg, run_dir, MRQ, commit, which))


if __name__ == "__main__":
    main()
