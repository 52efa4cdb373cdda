"""Launcher and sweeper presets, and the Hydra plugin each needs: checked before Hydra starts, so a
missing plugin gets an install hint rather than Hydra's "Could not find 'hydra/launcher/ray'".
The config group choices of the command line (agent=, env=, ...) are checked there too, and a SLURM
or Ray sweep's cluster (and SLURM partition), before any job is submitted."""
from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
import socket
import subprocess

_JOBLIB = ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher", "uv sync")
_SUBMITIT = ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher", "uv sync")
_RAY = ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher", "uv sync --extra ray")
_OPTUNA = ("hydra_plugins.hydra_optuna_sweeper", "hydra-optuna-sweeper", "uv sync")

PRESETS = {
    "hydra/launcher": {"joblib": _JOBLIB, "submitit_local": _SUBMITIT, "submitit_slurm": _SUBMITIT,
                       "slurm": _SUBMITIT, "ray": _RAY, "ray_cluster": _RAY, "ray_aws": _RAY},
    "hydra/sweeper": {"optuna": _OPTUNA, "optuna_dqn": _OPTUNA, "optuna_td3": _OPTUNA},
}


def parsed_overrides(argv: list[str]) -> list:
    """(index in argv, Override) of each argument Hydra's override parser reads, as Hydra will read it
    (quoted values, `choice(...)` and `+`/`++` forms included); flags and what it cannot parse are left
    out (Hydra reports those with its own message)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, found = OverridesParser.create(), []
    for i, arg in enumerate(argv):
        if arg.startswith("-"):
            continue
        try:
            found.append((i, parser.parse_overrides([arg.strip().removeprefix("override ").strip()])[0]))
        except Exception:  # Hydra's own parse error, which Hydra reports when it starts
            continue
    return found


def override_values(override) -> list[str] | None:
    """The values an override gives, as strings: its one value, or each of a choice sweep's; None for a
    sweep that is no list of values (a range, an interval, a glob), which Hydra expands itself."""
    if not override.is_sweep_override():
        value = override.value()
        return None if value is None else [str(value)]
    from hydra.core.override_parser.types import ValueType

    if override.value_type not in (ValueType.SIMPLE_CHOICE_SWEEP, ValueType.CHOICE_SWEEP):
        return None
    return list(override.sweep_string_iterator())


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def missing_plugin(argv: list[str]) -> str | None:
    """The error for the first launcher/sweeper choice on the command line whose plugin is not
    installed, or None."""
    for _, o in parsed_overrides(argv):
        group, values = o.key_or_group, override_values(o) or []
        for choice in values if group in PRESETS else []:
            if choice not in PRESETS[group]:
                continue
            module, package, install = PRESETS[group][choice]
            if not _installed(module):
                others = sorted(name for name, (mod, *_) in PRESETS[group].items() if _installed(mod))
                return (
                    f"{group}={choice} needs Hydra's {package} plugin, which is not installed in "
                    f"this environment. Install it with `{install}` (or `pip install {package}`), or choose "
                    f"another {group.split('/')[1]} that is installed: {', '.join(['basic', *others])}."
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
    for _, o in parsed_overrides(argv):
        group, values = o.key_or_group, override_values(o)
        if group not in groups or values is None:
            continue
        options = sorted(f[:-5] for f in os.listdir(os.path.join(conf_dir, group)) if f.endswith(".yaml"))
        for choice in values:
            if choice in options or choice == "null":
                continue
            close = difflib.get_close_matches(choice, options, n=1)
            hint = f" Did you mean {group}={close[0]}?" if close else ""
            if group == "env" and not close:
                hint += (" An env without a config of its own runs with another's settings and its id, "
                         "e.g. env=pendulum env.id=MountainCarContinuous-v0.")
            return (f"{group}={choice} names no config in conf/{group}/; the choices are {', '.join(options)}.{hint}")
    return None


def _override(argv: list[str], key: str) -> str | None:
    """The value the command line gives `key` (the last one; a sweep's values joined by commas), or None."""
    values = [",".join(override_values(o) or []) for _, o in parsed_overrides(argv) if o.key_or_group == key]
    return values[-1] if values else None


def slurm_problem(argv: list[str]) -> str | None:
    """The error for a SLURM sweep (-m with hydra/launcher=slurm) this machine cannot submit: no
    sbatch or sinfo here, a cluster that does not answer, or a partition it does not have. Checked
    before Hydra starts, so a failed submission never leaves part of a sweep on the cluster."""
    if _override(argv, "hydra/launcher") not in ("slurm", "submitit_slurm") or not {"-m", "--multirun"} & set(argv):
        return None
    for tool in ("sbatch", "sinfo"):
        if shutil.which(tool) is None:
            return (f"hydra/launcher=slurm submits the sweep's jobs with SLURM's sbatch, and `{tool}` is not on PATH "
                    f"here. Run the sweep on the cluster's login node (or load its SLURM module, e.g. `module load "
                    f"slurm`), or sweep on this machine with hydra/launcher=joblib. Nothing was submitted.")
    where = f"SLURM_CONF={os.environ['SLURM_CONF']}" if os.environ.get("SLURM_CONF") else "SLURM_CONF is not set"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=30)
        failure = None if proc.returncode == 0 else (proc.stderr.strip() or f"exit code {proc.returncode}")
    except subprocess.TimeoutExpired:
        failure = "no answer within 30 s"
    if failure is not None:
        return (f"hydra/launcher=slurm cannot reach the SLURM cluster: `sinfo` failed ({failure}). Check that the "
                f"controller is up (`scontrol ping`) and that this machine uses the cluster's slurm.conf ({where}); "
                f"for the one-host cluster of this repository, `bash cluster/slurm.sh up` starts it and prints the "
                f"SLURM_CONF to export. Nothing was submitted.")
    partitions = sorted(set(proc.stdout.split()))
    asked = _override(argv, "hydra.launcher.partition")
    unknown = [p for p in (asked or "").split(",") if p and p != "null" and p not in partitions]
    if unknown:
        return (f"hydra.launcher.partition={asked}: this SLURM cluster has no partition {', '.join(unknown)}; its "
                f"partitions are {', '.join(partitions) or '(none)'} (`sinfo` lists them). Nothing was submitted.")
    return None


def ray_problem(argv: list[str]) -> str | None:
    """The error for a sweep on a Ray cluster (-m with hydra/launcher=ray_cluster) whose head does
    not answer, or None. Checked before Hydra starts: no job is launched."""
    if _override(argv, "hydra/launcher") != "ray_cluster" or not {"-m", "--multirun"} & set(argv):
        return None
    address = _override(argv, "hydra.launcher.ray.init.address") or os.environ.get("RAY_ADDRESS") or "auto"
    start = ("Start one (`bash cluster/ray.sh up` starts one on this host and prints the RAY_ADDRESS to export), or "
             "give the head's address: export RAY_ADDRESS=HOST:PORT. Nothing was launched.")
    if address == "auto":  # Ray connects to a head running on this host: its GCS server
        if not any(_program(pid).endswith(b"/gcs_server") for pid in os.listdir("/proc") if pid.isdigit()):
            return (f"hydra/launcher=ray_cluster needs a running Ray cluster: RAY_ADDRESS is not set and no Ray head "
                    f"runs on this host. {start}")
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError) as err:
        return f"hydra/launcher=ray_cluster cannot reach the Ray cluster at {address} ({err}). {start}"
    return None


def _program(pid: str) -> bytes:
    """The path a process was started as (its command line's first word), or b"" if it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0]
    except OSError:
        return b""
