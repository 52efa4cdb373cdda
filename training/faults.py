"""Faults that end a run, each with a message that names the fix: an agent whose losses or
weights became NaN or infinite (`Diverged`), and a run directory that cannot be written."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping

import numpy as np


class Diverged(RuntimeError):
    """Losses or weights of the agent that are NaN or infinite: training cannot recover from it."""

    def __init__(self, step: int, bad: dict[str, str], what: str):
        self.step, self.bad, self.what = step, bad, what
        shown = ", ".join(f"{k}{v}" for k, v in list(bad.items())[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
        super().__init__(f"training diverged: at step {step} the {what} are NaN or infinite ({shown})")


def check_finite(values: Mapping[str, Any] | None, step: int, what: str = "update metrics") -> None:
    """Raise Diverged if a value of `values` (floats, arrays or tensors) holds a NaN or an inf.
    Values that are not floating point (counters) are not looked at."""
    bad = {}
    for name, value in (values or {}).items():
        a = np.asarray(value)
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            bad[name] = f"={a.item()}" if a.ndim == 0 else f" ({a.size - int(np.isfinite(a).sum())} of {a.size} values)"
    if bad:
        raise Diverged(step, bad, what)


def write_problem(path: str) -> str | None:
    """Why a run cannot write in the directory `path`, or None. It is tried for real (root passes
    every permission check, and a full or read-only disk shows only on writing): the directory is
    created if absent, and a file of 256 KiB is written, synced and removed in it."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        parent = os.path.dirname(os.path.abspath(path))
        while parent != os.path.dirname(parent) and not os.path.isdir(parent):
            if os.path.exists(parent):
                return f"{parent} is a file, not a directory"
            parent = os.path.dirname(parent)
        return f"it cannot be created in {parent} ({err.strerror or err})"
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(256 << 10))
                f.flush()
                os.fsync(f.fileno())
        finally:
            os.remove(probe)
    except OSError as err:
        return f"a file cannot be written in it ({err.strerror or err})"
    return None
