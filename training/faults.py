"""Faults that end a run before its end, each with a message that names the fix: an agent whose
losses or weights became NaN or infinite (`Diverged`), a run directory that cannot be written, and
a write that fails mid-run (a full disk). train.py turns them into one `error:` paragraph and an
exit code: 2 bad input, 3 diverged, 4 a write failed."""
from __future__ import annotations

import errno
import os
import tempfile
from typing import Any, Mapping

import numpy as np

# The errors of a write that fails for a reason of the machine, not of the code: the disk or the
# quota is full, a file grew past the size the filesystem allows, the filesystem is read-only or
# the device failed.
WRITE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


# A job of a sweep that failed (bad input, a write fault) records its error here, in its run dir,
# and the sweep goes on: aggregate.py reports it as failed, with the error.
FAILED = "failed.json"


def record_failure(run_dir: str, message: str, exit_code: int) -> None:
    """Write the failed job's record; a run dir that cannot be written (the fault itself) keeps none."""
    import json

    try:
        with open(os.path.join(run_dir, FAILED), "w") as f:
            json.dump({"error": message, "exit_code": exit_code}, f, indent=2)
    except OSError:
        pass


def clear_failure(run_dir: str) -> None:
    """A run that starts again (resumed, or rerun with resume=auto) is no longer a failed one."""
    try:
        os.remove(os.path.join(run_dir, FAILED))
    except FileNotFoundError:
        pass


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


def write_failure(err: OSError, run_dir: str, last: str, what: str = "to the run directory",
                  removed: str | None = None) -> str:
    """The message for a write in `run_dir` that failed with `err` (one of WRITE_FAULTS); `last`:
    the sentence on its last checkpoint (training.checkpoints.last_checkpoint); `removed`: the
    partial file or directory the failed write left, which was removed."""
    where = f": {err.filename}" if err.filename else ""
    reason = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up"}.get(err.errno)
    fix = (f"Free space on the disk of {run_dir} (df -h {run_dir}), or move the run to a larger disk"
           if reason else f"Repair or remount the filesystem of {run_dir}, or move the run to another disk")
    return (f"could not write {what}: {reason or 'the write failed'} ({err.strerror or err}{where}). The run "
            f"stopped{f', and the partial {removed} was removed' if removed else ''}. {fix}. {last}")


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
