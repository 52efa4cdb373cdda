"""Loggers take plain float metrics from the loop and fan them out: console, CSV, TensorBoard."""
from __future__ import annotations

import csv
import math
import os
from typing import Protocol


class Logger(Protocol):
    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None: ...
    def close(self) -> None: ...


class CSVLogger:
    """One CSV per kind of record (`train.csv`, `eval.csv`, `update.csv`) in the run directory.
    A record with a column the file lacks widens the file (rare: e.g. losses appear once
    updates begin), so every row keeps its values under the right header."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._files: dict[str, tuple] = {}

    def _open(self, kind: str, fields: list[str]):
        path = os.path.join(self.run_dir, f"{kind}.csv")
        rows: list[dict] = []
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                rows = list(reader)
                fields = list(reader.fieldnames or []) + [k for k in fields if k not in (reader.fieldnames or [])]
        f = open(path, "w", newline="")
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
        self._files[kind] = (f, writer)

    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        fields = ["step", *metrics]
        if kind not in self._files or not set(fields) <= set(self._files[kind][1].fieldnames):
            if kind in self._files:
                self._files[kind][0].close()
            self._open(kind, fields)
        f, writer = self._files[kind]
        writer.writerow({"step": step, **metrics})
        f.flush()

    def close(self) -> None:
        for f, _ in self._files.values():
            f.close()
        self._files.clear()


class ConsoleLogger:
    """Prints evaluation results (and, if asked, every record) above the progress bar."""

    def __init__(self, kinds: tuple[str, ...] = ("eval",), write=print):
        self.kinds = kinds
        self._write = write

    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        if kind in self.kinds:
            body = "  ".join(f"{k}={_fmt(v)}" for k, v in metrics.items())
            self._write(f"[{kind}] step={step}  {body}")

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """Scalars as `<kind>/<name>` in TensorBoard event files under `<run_dir>/tb`."""

    def __init__(self, run_dir: str):
        import tensorflow as tf

        self._tf = tf
        self._writer = tf.summary.create_file_writer(os.path.join(run_dir, "tb"))

    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        with self._writer.as_default(step=step):
            for name, value in metrics.items():
                self._tf.summary.scalar(f"{kind}/{name}", value)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


class MultiLogger:
    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers

    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        for logger in self.loggers:
            logger.log(kind, step, metrics)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def _fmt(v: float) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e9):
        return str(int(v))
    return f"{v:.4g}" if math.isfinite(v) else str(v)
