"""train.py's command line, read before Hydra starts (`read_command_line`): the ecosystem's env ids
as the env groups of this project that mean them, and the refusals of training/plugins.py.

A user arrives with `env.id=ALE/Pong-v5` (the Arcade Learning Environment's registration),
`env.id=dm_control/cheetah-run-v0` (Shimmy's) or `env.id=MinAtar/Breakout-v1` (MinAtar's own). Each
names a game or task that a group here runs with its suite's frames and protocol (`env=atari`,
`env=dmc`, `env=minatar`), so the command line is read as that group and its game or task before
Hydra composes it: `env.id=ALE/Pong-v5` is `env=atari env.game=Pong`. Any other id is left as it is.
The command line is read with Hydra's own override parser."""
from __future__ import annotations

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


def read_command_line(argv: list[str]) -> list[str]:
    """train.py's command line as Hydra is to read it (the ecosystem's env ids as this project's
    groups, above), or a ConfigError for what is refused before Hydra starts: a
    missing plugin, a group choice with no config, a cluster that cannot take the sweep."""
    argv = ecosystem_ids(argv)
    if (problem := missing_plugin(argv) or unknown_choice(argv) or slurm_problem(argv) or ray_problem(argv)) is not None:
        raise ConfigError(problem)
    return argv
