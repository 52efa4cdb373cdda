"""Launcher and sweeper presets, and the Hydra plugin each needs: checked before Hydra starts, so a
missing plugin gets an install hint rather than Hydra's "Could not find 'hydra/launcher/ray'".
The config group choices of the command line (agent=, env=, ...) are checked there too."""
from __future__ import annotations

import difflib
import importlib.util
import os
import re

_JOBLIB = ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher", "uv sync")
_SUBMITIT = ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher", "uv sync")
_RAY = ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher", "uv sync --extra ray")
_OPTUNA = ("hydra_plugins.hydra_optuna_sweeper", "hydra-optuna-sweeper", "uv sync")

PRESETS = {
    "hydra/launcher": {"joblib": _JOBLIB, "submitit_local": _SUBMITIT, "submitit_slurm": _SUBMITIT,
                       "slurm": _SUBMITIT, "ray": _RAY, "ray_aws": _RAY},
    "hydra/sweeper": {"optuna": _OPTUNA, "optuna_dqn": _OPTUNA, "optuna_td3": _OPTUNA},
}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def missing_plugin(argv: list[str]) -> str | None:
    """The error for the first launcher/sweeper choice on the command line whose plugin is not
    installed, or None."""
    for arg in argv:
        m = re.fullmatch(r"(?:override\s+)?(hydra/launcher|hydra/sweeper)=(\w+)", arg.strip())
        if not m or m.group(2) not in PRESETS[m.group(1)]:
            continue
        module, package, install = PRESETS[m.group(1)][m.group(2)]
        if not _installed(module):
            others = sorted(name for name, (mod, *_) in PRESETS[m.group(1)].items() if _installed(mod))
            return (
                f"{m.group(1)}={m.group(2)} needs Hydra's {package} plugin, which is not installed in "
                f"this environment. Install it with `{install}` (or `pip install {package}`), or choose "
                f"another {m.group(1).split('/')[1]} that is installed: {', '.join(['basic', *others])}."
            )
    return None


CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def unknown_choice(argv: list[str], conf_dir: str = CONF_DIR) -> str | None:
    """The error for the first config group choice on the command line (agent=, env=, network=,
    buffer=, or each of a sweep's comma-separated choices) that names no file in conf/<group>/, or
    None. Hydra's own message for it is a listing with its search path and exit code 1. A command
    line that adds config directories or picks another primary config is left to Hydra."""
    if any(a.startswith(("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn", "hydra.searchpath"))
           for a in argv):
        return None
    groups = {g for g in os.listdir(conf_dir) if g != "hydra" and os.path.isdir(os.path.join(conf_dir, g))}
    for arg in argv:
        m = re.fullmatch(r"(?:override\s+)?\+{0,2}(\w+)=([\w.-]+(?:,[\w.-]+)*)", arg.strip())
        if not m or m.group(1) not in groups:
            continue
        group = m.group(1)
        options = sorted(f[:-5] for f in os.listdir(os.path.join(conf_dir, group)) if f.endswith(".yaml"))
        for choice in m.group(2).split(","):
            if choice in options or choice == "null":
                continue
            close = difflib.get_close_matches(choice, options, n=1)
            hint = f" Did you mean {group}={close[0]}?" if close else ""
            if group == "env" and not close:
                hint += (" An env without a config of its own runs with another's settings and its id, "
                         "e.g. env=pendulum env.id=MountainCarContinuous-v0.")
            return (f"{group}={choice} names no config in conf/{group}/; the choices are {', '.join(options)}.{hint}")
    return None
