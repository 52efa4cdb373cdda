"""The TD7 author's own PyTorch code (github.com/sfujim/TD7's `TD7.Agent`, its hyper-parameters
unchanged), trained by the loop of the author's main.py (`train_online`) on the env and run length of
the train.py run that the same overrides compose, and written as a run directory that aggregate.py
reads: the reference check of tfrl's TD7. Runs in SB3's venv (`bash benchmarks/setup_sb3.sh`) on
the author's files that `bash benchmarks/setup_author.sh td7` copies into benchmarks/.td7-ref:

    benchmarks/.venv-sb3/bin/python benchmarks/td7_reference.py agent=td7 env=hopper seed=0 total_steps=100000
    uv run python train.py agent=td7 env=hopper seed=0 total_steps=100000
    uv run python aggregate.py <the run dirs of both> --by implementation=tfrl

From the composed config: env.id (and its time limits and kwargs, as sb3_learning.py makes the env),
seed, total_steps, eval_every, eval_episodes, and learning_starts as the author's
`timesteps_before_training`. Everything else is the author's `Hyperparameters()` whatever the agent,
network and buffer groups say (the LAP buffer, checkpoints, batch training at episode ends).
The author's loop, ported to gymnasium: random actions until the first episode end at or after step
learning_starts, then the exploring actor; a time-limit truncation is not a terminal; at every episode
end after that, `maybe_train_and_checkpoint`. The evaluation is sb3_learning.py's (training/
evaluation.py's: `eval_episodes` episodes at step 0, every `eval_every` steps and at the end, on an env
whose first reset is seeded with seed + 100, into eval.csv with train.py's columns), acting with the
author's evaluation policy: the checkpoint's actor, without noise.
`td7_author.threads=N` sets torch's intra-op threads (null: torch's default).
"""
from __future__ import annotations

import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(ROOT, "benchmarks", ".td7-ref")  # setup_author.sh's copy of the author's TD7.py and buffer.py
sys.path.insert(0, ROOT)  # conf/config.yaml's Hydra callbacks live in training/callbacks.py

import hydra  # noqa: E402
import numpy as np  # noqa: E402
from hydra.core.config_store import ConfigStore  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from benchmarks.sb3_learning import EvalLog, finish, make_env, refuse  # noqa: E402

# train.py's config and this script's two keys, kept here rather than in conf/
ConfigStore.instance().store(name="td7_reference", node={
    "defaults": ["config", "_self_"],
    "implementation": "td7-author",  # aggregate.py --by implementation=tfrl tells these runs from train.py's
    "td7_author": {"threads": None},  # torch's intra-op threads; null = torch's default (one per core)
})


def author_td7():
    """The author's TD7 module from benchmarks/.td7-ref and the commit it was copied at; None if absent."""
    if not os.path.isfile(os.path.join(REF, "TD7.py")):
        return None, None
    sys.path.insert(0, REF)  # TD7.py imports its neighbour as `buffer`
    import TD7

    with open(os.path.join(REF, "COMMIT")) as f:
        return TD7, f.read().strip()


def hyperparameters(hp) -> dict:
    """The author's Hyperparameters as JSON values (activations by name)."""
    return {k: getattr(v, "__name__", v) for k, v in dataclasses.asdict(hp).items()}


class TD7Policy:
    """The author's evaluation policy (checkpoint actor and encoder, no noise) behind the Agent
    protocol's `act`, for training/evaluation.py."""

    def __init__(self, agent):
        self.agent = agent

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        return self.agent.select_action(np.asarray(obs[0]), use_checkpoint=True, use_exploration=explore)[None]


def train(cfg: DictConfig, run_dir: str, TD7, commit: str) -> dict:
    """Train the author's TD7 as main.py's `train_online` does, evaluating into run_dir/eval.csv."""
    import torch

    if cfg.td7_author.threads:
        torch.set_num_threads(int(cfg.td7_author.threads))
    seed = int(cfg.seed)
    env, eval_env = make_env(cfg), make_env(cfg, eval=True)
    env.action_space.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)
    hp = TD7.Hyperparameters()
    agent = TD7.Agent(env.observation_space.shape[0], env.action_space.shape[0],
                      float(env.action_space.high[0]), hp=hp)  # the author's max_action: a symmetric box
    policy = TD7Policy(agent)
    total, every, learning_starts = int(cfg.total_steps), int(cfg.eval_every), int(cfg.learning_starts)
    with EvalLog(run_dir, policy, eval_env, cfg) as log:
        allow_train = False
        state, _ = env.reset(seed=seed)
        ep_total_reward, ep_timesteps = 0.0, 0
        for t in range(total):
            if t % every == 0:
                log.record(t)
            action = agent.select_action(np.array(state)) if allow_train else env.action_space.sample()
            next_state, reward, terminated, truncated, _ = env.step(action)
            ep_total_reward += float(reward)
            ep_timesteps += 1
            # the author's `done = ep_finished if ep_timesteps < _max_episode_steps else 0`: truncation is no terminal
            agent.replay_buffer.add(state, action, next_state, reward, float(terminated))
            state = next_state
            if terminated or truncated:
                if allow_train:  # use_checkpoints: all training happens here, one update per step since the last
                    agent.maybe_train_and_checkpoint(ep_timesteps, ep_total_reward)
                if t >= learning_starts:
                    allow_train = True
                state, _ = env.reset()
                ep_total_reward, ep_timesteps = 0.0, 0
        log.record(total)
    return {**log.summary(total), "implementation": "td7-author", "agent": "td7", "env": cfg.env.id,
            "td7_settings": {"commit": commit, "timesteps_before_training": learning_starts, "use_checkpoints": True,
                             "updates": agent.training_steps, "hyperparameters": hyperparameters(hp)},
            "torch_threads": torch.get_num_threads()}


@hydra.main(version_base="1.3", config_path="../conf", config_name="td7_reference")
def main(cfg: DictConfig) -> None:
    run_dir = HydraConfig.get().runtime.output_dir
    TD7, commit = author_td7()
    if TD7 is None:
        refuse(run_dir, f"the author's TD7 is not in {REF}: run `bash benchmarks/setup_author.sh td7` "
                        f"(SRC=<a clone of sfujim/TD7> without network).")
    finish(run_dir, train(cfg, run_dir, TD7, commit))


if __name__ == "__main__":
    main()
