"""What produced a run, for its summary.json and each checkpoint's meta.json: the project's commit
(and whether its tracked files had changes) and the versions of Python and of the libraries that
shape a run's numbers, so that a published figure can be tied to what made it."""
from __future__ import annotations

import functools
import os
import platform
import subprocess
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("tensorflow", "keras", "numpy", "gymnasium", "mujoco", "dm-control", "ale-py")


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def provenance() -> dict:
    """{"code": {"commit", "dirty"}, "versions": {package: version}}; commit and dirty are None
    outside a git checkout (an installed copy), a version None for a package not installed."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"code": {"commit": commit.strip() if commit else None, "dirty": bool(status.strip()) if status is not None else None},
            "versions": {"python": platform.python_version(), **{p: _version(p) for p in PACKAGES}}}
