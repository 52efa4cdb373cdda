"""What an agent asks of the runner beyond the Agent protocol (`Needs`), and the records it declares
there: TD7's policy checkpoints, the replay a LAP loss is defined on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents import checks
from agents.acting import Forward
from agents.replay import Block, Transitions


@dataclass(frozen=True)
class PolicyCheckpoints:
    """TD7's policy checkpoints (sfujim/TD7's `maybe_train_and_checkpoint`; training/assessment.py
    runs them): the agent trains at episode ends; before it does, the policy that acted is kept as
    the evaluation policy if the lowest return of the episodes that assessed it (1, or `episodes`
    once `after` updates are done) was not below the kept one's, which is scaled by `reset_weight`
    at that point. An episode below it ends the assessment early."""

    episodes: int = 20
    after: int = 750_000
    reset_weight: float = 0.9

    def __post_init__(self):  # the settings are TD7's agent.checkpoint_* keys
        checks.integer(self.episodes, "checkpoint_episodes", "an integer >= 1 (20 in TD7)")
        checks.integer(self.after, "checkpoint_after", "an integer >= 1 (750000 in TD7)")
        checks.number(self.reset_weight, "checkpoint_reset_weight", "in (0, 1] (0.9 in TD7)", lambda x: 0 < x <= 1)


@dataclass(frozen=True)
class LapReplay:
    """The replay a LAP loss is defined on (Fujimoto et al. 2020): sampled by priorities floored
    at `min_priority`, no importance weights, the largest priority reset every `reset_every` updates."""

    min_priority: float
    reset_every: int


@dataclass(frozen=True)
class Rollout:
    """An on-policy agent's rollouts (training/rollout.py): `steps` per env before each update, GAE's
    `gae_lambda`, the update's `minibatches` (which must divide steps x envs), whether a time limit
    bootstraps from the final observation's value (SB3) or ends the return as a termination does
    (CleanRL), and whether rewards are scaled by running return statistics (CleanRL on MuJoCo)."""

    steps: int
    gae_lambda: float
    minibatches: int
    bootstrap_truncation: bool = False
    normalize_reward: bool = False


@dataclass(frozen=True)
class Needs:
    """What an agent asks of the runner beyond the Agent protocol, declared here and read by
    training/, never probed for:
    - `population`: trained by generations (training/evolution.py), not from replay (agents/ga/);
    - `rollout`: trained on its own rollouts (training/rollout.py), not from replay (agents/ppo/);
    - `evaluation`: the network evaluation and export act with, when it is not `acting` (TD7's
      checkpoint policy); the runner copies `acting`'s weights into it when `policy_checkpoints` say so;
    - `policy_checkpoints`: train at episode ends and keep the best assessed policy (TD7);
    - `lap`: the critic loss is LAP's and needs LAP's replay (a LapReplay), or it is a squared
      error that LAP's replay would bias (False), or the agent has no view (None);
    - `replay`: what one update takes from replay (agents/replay.py): a Batch of transitions, or
      MR.Q's transitions and runs;
    - `block`: updates of one part run many in a row every so many updates, each on its own draw
      (agents/replay.py: MR.Q's encoder in its author's schedule), or None."""

    population: bool = False
    rollout: Rollout | None = None
    evaluation: Forward | None = None
    policy_checkpoints: PolicyCheckpoints | None = None
    lap: LapReplay | Literal[False] | None = None
    replay: Transitions = Transitions()
    block: Block | None = None
