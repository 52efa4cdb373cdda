"""train.py's command line, read before Hydra starts (`read_command_line`): the ecosystem's env ids
as the env groups of this project that mean them, and the refusals of training/plugins.py.

A user arrives with `env.id=ALE/Pong-v5` (the Arcade Learning Environment's registration),
`env.id=dm_control/cheetah-run-v0` (Shimmy's) or `env.id=MinAtar/Breakout-v1` (MinAtar's own). Each
names a game or task that a group here runs with its suite's frames and protocol (`env=atari`,
`env=dmc`, `env=minatar`), so the command line is read as that group and its game or task before
Hydra composes it: `env.id=ALE/Pong-v5` is `env=atari env.game=Pong`. Any other id is left as it is.
The command line is read with Hydra's own override parser."""
from __future__ import annotations

import difflib
import re

from training.config import ConfigError
from training.plugins import missing_plugin, override_values, parsed_overrides, ray_problem, slurm_problem, unknown_choice

# id pattern -> (the group, {its key: a function of the match giving the value})
IDS = [
    (re.compile(r"ALE/(\w+)-v5|(\w+)NoFrameskip-v4"), "atari", {"game": lambda m: m.group(1) or m.group(2)}),
    (re.compile(r"dm_control/([a-z_]+)-([a-z_]+)-v\d+"), "dmc", {"domain": lambda m: m.group(1),
                                                                  "task": lambda m: m.group(2)}),
    (re.compile(r"MinAtar/(\w+)-v[01]"), "minatar",
     {"game": lambda m: re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()}),  # SpaceInvaders: space_invaders
]


def ecosystem_ids(argv: list[str]) -> list[str]:
    """`argv` with an `env.id=` that names an ecosystem id replaced by the group and keys it means.
    A ConfigError when the rest of the command line contradicts it (another env group, another game),
    or when such ids are swept (sweep the group's own key instead)."""
    overrides = parsed_overrides(argv)
    for i, o in overrides:
        if o.key_or_group != "env.id":
            continue
        values = override_values(o) or []
        matches = [(pattern.fullmatch(v), group, keys) for v in values for pattern, group, keys in IDS
                   if pattern.fullmatch(v)]
        if not matches:
            continue
        if o.is_sweep_override():
            raise ConfigError(f"{argv[i]} sweeps ecosystem ids; sweep the suite's own key instead, e.g. "
                              f"env=atari env.game=Pong,Breakout or env=dmc env.domain=cheetah,walker.")
        m, group, keys = matches[0]
        meant = {f"env.{key}": get(m) for key, get in keys.items()}
        said = {other.key_or_group: str(other.value()) for _, other in overrides if other.key_or_group in {"env", *meant}}
        if said.get("env", group) != group:
            raise ConfigError(f"env.id={values[0]} is env={group}'s, but the command line also says env={said['env']}; "
                              f"drop one of them.")
        for key, value in meant.items():
            if said.get(key, value) != value:
                raise ConfigError(f"env.id={values[0]} means env={group} {key}={value}, but the command line also "
                                  f"says {key}={said[key]}; drop one of them.")
        dropped = {j for j, other in overrides if other.key_or_group in {"env", "env.id", *meant}}
        return [a for j, a in enumerate(argv) if j not in dropped] + [f"env={group}", *(f"{k}={v}" for k, v in meant.items())]
    return argv


# other toolkits' names for an agent's settings (SB3's, CleanRL's) -> this project's, the first the agent has
ALIASES = {"clip_range": ("clip_coef",), "n_epochs": ("update_epochs",), "num_steps": ("n_steps",),
           "learning_rate": ("lr", "actor_lr"), "normalize_advantage": ("norm_adv",), "clip_range_vf": ("clip_vloss",),
           "batch_size": ("num_minibatches", "batch_size"), "num_envs": ("num_envs",), "gamma": ("gamma",),
           "total_timesteps": ("total_steps",), "learning_starts": ("learning_starts",),
           "buffer_size": ("buffer.capacity",), "train_freq": ("train_every",), "gradient_steps": ("updates_per_step",)}
# the run's settings, not the agent's
TOP_LEVEL = ("batch_size", "num_envs", "gamma", "total_steps", "learning_starts", "buffer.capacity", "train_every",
             "updates_per_step")


def _fix(key: str, known: set[str]) -> str:
    """How to say `key` to an agent with the settings `known`."""
    for meant in ALIASES.get(key, ()):
        if meant == "num_minibatches" and meant in known:
            return ("SB3's batch_size is a minibatch's size; here the rollout is cut into agent.num_minibatches "
                    "(n_steps x num_envs / batch_size).")
        if meant == "actor_lr" and meant in known:
            rates = ", ".join(f"agent.{k}" for k in ("actor_lr", "critic_lr", "alpha_lr") if k in known)
            return f"{key} is SB3's one rate for every network; here each has its own: {rates}."
        if meant in known:
            return f"{key} is another toolkit's name (SB3's or CleanRL's) for agent.{meant} here: set agent.{meant}=<value>."
        if meant in TOP_LEVEL:
            return f"{key} is not an agent setting here but the run's: set {meant}=<value>."
    settings = ", ".join(sorted(k for k in known if not k.startswith("_")))
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return (f"did you mean agent.{close[0]}? Its settings: {settings}." if close else f"its settings are {settings}.")


def unknown_agent_setting(argv: list[str]) -> str | None:
    """The error for an `agent.<key>=` the chosen agent has no setting for (Hydra's own: "Key is not in
    struct", with a hint to add it with `+`, which the agent would refuse): its name elsewhere (SB3's
    `clip_range` is `agent.clip_coef` here), a close match, or the agent's settings; None if every
    key is known, or if the command line does not compose without them (Hydra then says why)."""
    from training.config import compose_config

    overrides = parsed_overrides(argv)
    asked = [(argv[i], o.key_or_group.split(".", 1)[1]) for i, o in overrides
             if o.key_or_group.startswith("agent.") and o.key_or_group.count(".") == 1
             and not (o.is_add() or o.is_force_add() or o.is_delete())]
    if not asked:
        return None
    choices = [values for _, o in overrides if o.key_or_group == "agent" for values in [override_values(o)]]
    base = [argv[i] for i, o in overrides if not o.key_or_group.startswith(("agent", "hydra"))
            and not o.is_sweep_override()]
    for choice in (choices[-1] if choices and choices[-1] else [None]):
        try:
            known = set(compose_config([*base, *([f"agent={choice}"] if choice else [])]).agent)
        except Exception:  # the rest of the command line does not compose: Hydra reports it
            return None
        name = f"agent={choice}" if choice else "this agent (agent=td3, the default)"
        for arg, key in asked:
            if key not in known:
                return f"`{arg}`: {name} has no setting {key!r}; {_fix(key, known)}"
    return None


def read_command_line(argv: list[str]) -> list[str]:
    """train.py's command line as Hydra is to read it (the ecosystem's env ids as this project's
    groups, above), or a ConfigError for what is refused before Hydra starts: a
    missing plugin, a group choice with no config, a cluster that cannot take the sweep, an agent
    setting the agent does not have."""
    argv = ecosystem_ids(argv)
    if (problem := missing_plugin(argv) or unknown_choice(argv) or slurm_problem(argv) or ray_problem(argv)
            or unknown_agent_setting(argv)) is not None:
        raise ConfigError(problem)
    return argv
