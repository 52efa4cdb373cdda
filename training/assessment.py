"""Policy checkpoints (Fujimoto et al. 2023, "For SALE", section 5; sfujim/TD7's
`maybe_train_and_checkpoint` and `train_and_reset`), for any agent that declares them
(`Needs.policy_checkpoints`, with the network evaluation acts with as `Needs.evaluation`).

Such an agent trains at episode ends. The training episodes between two training phases assess
the policy that acted: once `max_episodes` of them are done (1, or `episodes` after `after`
updates) and their lowest return is not below the kept policy's, the acting policy becomes the
kept one before the phase trains; an episode below the kept policy's lowest return ends the
assessment early and trains without keeping it. The loop carries the state (`LoopState.assessment`).
"""
from __future__ import annotations

from typing import NamedTuple

from agents.needs import PolicyCheckpoints


class Assessment(NamedTuple):
    """Where the assessment of the acting policy stands (the author's tracked values)."""

    episodes: float = 0.0  # episodes of this assessment so far
    max_episodes: float = 1.0  # episodes that assess one policy
    min_return: float = 1e8  # the lowest return among them
    best_min_return: float = -1e8  # the kept policy's lowest return


def assess(state: Assessment, ret: float, settings: PolicyCheckpoints, updates_done: int,
           updates_due: int) -> tuple[Assessment, bool, bool]:
    """One training episode's end, of return `ret`: the new state, whether the updates due train
    now, and whether the acting policy is kept first. `updates_done` before this phase and the
    `updates_due` in it place the switch to `settings.episodes` episodes per assessment, which
    the author checks before each update."""
    state = state._replace(episodes=state.episodes + 1, min_return=min(state.min_return, ret))
    if state.min_return < state.best_min_return:  # below the kept policy: assessment over, train
        keep = False
    elif state.episodes == state.max_episodes:
        state, keep = state._replace(best_min_return=state.min_return), True
    else:
        return state, False, False
    if updates_done <= settings.after < updates_done + updates_due:
        state = state._replace(best_min_return=state.best_min_return * settings.reset_weight,
                               max_episodes=float(settings.episodes))
    return state._replace(episodes=0.0, min_return=1e8), True, keep
