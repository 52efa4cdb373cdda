"""Faults that end a run, each with a message that names the fix: a run directory that cannot be
written."""
from __future__ import annotations

import os
import tempfile


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
