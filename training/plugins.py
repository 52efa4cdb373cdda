"""Launcher and sweeper presets, and the Hydra plugin each needs: checked before Hydra starts, so a
missing plugin gets an install hint rather than Hydra's "Could not find 'hydra/launcher/ray'".
The config group choices of the command line (agent=, env=, ...) are checked there too, and a SLURM
or Ray sweep's cluster (and SLURM partition), before any job is submitted."""
from __future__ import annotations

import difflib
import importlib.util
import os
import re
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


def _override(argv: list[str], key: str) -> str | None:
    """The value the command line gives `key` (the last one), or None."""
    values = [m.group(1) for a in argv if (m := re.fullmatch(rf"(?:override\s+)?\+{{0,2}}{re.escape(key)}=(.*)", a.strip()))]
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
