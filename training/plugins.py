"""Launcher and sweeper presets, and the Hydra plugin each needs: checked before Hydra starts, so a
missing plugin gets an install hint rather than Hydra's "Could not find 'hydra/launcher/ray'"."""
from __future__ import annotations

import importlib.util
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
