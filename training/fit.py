"""What an agent declares it needs (`Needs`: LAP's replay, policy checkpoints, what an update draws),
checked against the run's settings and buffer before it trains, each mismatch an error that names the fix."""
from __future__ import annotations

from agents.needs import LapReplay, Needs
from buffers.prioritized import PrioritizedReplay
from buffers.types import Buffer
from training.config import ConfigError
from training.loop import LoopSettings


def check_fit(settings: LoopSettings, needs: Needs, buffer: Buffer | None) -> None:
    """What an agent declares it needs (LAP's replay, policy checkpoints), and training at episode
    ends, checked against the run's settings."""
    if needs.lap is not None and buffer is not None:
        check_lap(needs.lap, buffer)
    if buffer is not None:
        try:
            needs.replay.check(buffer)
        except ValueError as err:
            raise ConfigError(str(err)) from err
    if settings.train_at_episode_ends and settings.train_every != 1:
        raise ConfigError(f"train_every={settings.train_every} with training at episode ends: the updates due come at "
                          f"each episode's end, not every train_every steps; leave train_every at 1.")
    if needs.policy_checkpoints is not None:
        for key, value in (("num_envs", settings.num_envs), ("updates_per_step", settings.updates_per_step)):
            if value != 1:
                raise ConfigError(
                    f"{key}={value:g} with agent.checkpoints=true: the agent keeps policy checkpoints, so it trains "
                    f"at the end of each episode, one update per env step since its last training, on one env whose "
                    f"episodes assess one policy at a time; leave {key} at 1, or turn the agent's policy checkpoints "
                    f"off (agent.checkpoints=false for TD7) to train every step."
                )


def check_lap(lap: LapReplay | bool, buffer: Buffer) -> None:
    """TD7's LAP switch names what runs: with it, LAP's loss on LAP's replay (priorities floored at the
    loss's `min_priority`, no importance weights, the largest priority reset at each target update);
    without, TD3's squared error on uniform replay (the paper's ablation), or on prioritized replay
    with its importance weights (PER). Prioritized sampling under the squared error without the
    weights is neither, and the LAP paper's argument against it: refused."""
    lap_replay = isinstance(buffer, PrioritizedReplay) and not buffer.importance_weights
    if lap:
        problems = [] if lap_replay else ["samples uniformly" if not isinstance(buffer, PrioritizedReplay)
                                          else "weighs its samples by importance weights"]
        if lap_replay and buffer.min_priority != lap.min_priority:
            problems.append(f"floors priorities at buffer.min_priority={buffer.min_priority:g}, not agent.min_priority="
                            f"{lap.min_priority:g}")
        if lap_replay and buffer.max_reset_every != lap.reset_every:
            problems.append(f"resets its largest priority every buffer.max_reset_every={buffer.max_reset_every} updates, "
                            f"not at the agent's target updates (agent.target_update_every={lap.reset_every})")
        if problems:
            raise ConfigError(
                f"agent.lap=true trains the critics on LAP's loss, which is LAP only with replay sampled by priorities "
                f"floored at agent.min_priority, without importance weights, its largest priority reset at each target "
                f"update; this buffer {' and '.join(problems)}. Use buffer=lap (agent=td7's default, which takes both "
                f"settings from the agent: leave buffer= and buffer.* out of the command), or set agent.lap=false "
                f"buffer=uniform for TD7 without LAP.")
    elif lap_replay:
        raise ConfigError(
            "agent.lap=false trains the critics on TD3's squared error, but this buffer samples by priority without "
            "importance weights (buffer=lap, agent=td7's default): that is neither TD7 nor TD7 without LAP, and the "
            "biased combination the LAP paper argues against. For TD7 without LAP add buffer=uniform; for prioritized "
            "replay with its importance weights (PER), buffer=prioritized.")
