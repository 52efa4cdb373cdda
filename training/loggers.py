"""Loggers take plain float metrics from the loop and fan them out: console, CSV, TensorBoard."""
from __future__ import annotations

import csv
import math
import os
from typing import Protocol


class Logger(Protocol):
    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None: ...
    def close(self) -> None: ...


def _write_rows(path: str, fields: list[str], rows: list[dict]) -> None:
    """Replace the CSV file `path` by one of `rows`, through a temporary file renamed over it; a
    write that fails (a full disk) removes the temporary file and leaves `path` as it was."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, restval="")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class CSVLogger:
    """One CSV per kind of record (`train.csv`, `eval.csv`, `update.csv`) in the run directory.
    A record with a column the file lacks widens the file (rare: e.g. losses appear once
    updates begin), so every row keeps its values under the right header."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._files: dict[str, tuple] = {}

    def _open(self, kind: str, fields: list[str]):
        """Open `kind`.csv for appending, with a header that holds `fields`. A file that lacks
        some of them is rewritten with the wider header into a temporary file that then replaces
        it, so a kill at any moment leaves the old file or the new one, never a part of either."""
        path = os.path.join(self.run_dir, f"{kind}.csv")
        header: list[str] = []
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="") as f:
                header = list(csv.DictReader(f).fieldnames or [])
        if not header or not set(fields) <= set(header):
            rows: list[dict] = []
            if header:
                with open(path, newline="") as f:
                    rows = list(csv.DictReader(f))
            header = header + [k for k in fields if k not in header]
            _write_rows(path, header, rows)
        f = open(path, "a", newline="")
        self._files[kind] = (f, csv.DictWriter(f, fieldnames=header, restval=""))

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

    def truncate(self, kind: str, max_step: int | None = None, max_rows: int | None = None) -> None:
        """Drop rows a resumed run will write again: those past `max_step`, or beyond the first
        `max_rows`."""
        path = os.path.join(self.run_dir, f"{kind}.csv")
        if not os.path.exists(path):
            return
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = reader.fieldnames or ["step"], list(reader)
        if max_step is not None:
            rows = [r for r in rows if int(r["step"]) <= max_step]
        if max_rows is not None:
            rows = rows[:max_rows]
        _write_rows(path, fields, rows)


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

    def write_graph(self, graph) -> None:
        """Put a compiled function's graph in TensorBoard's Graphs tab."""
        with self._writer.as_default():
            self._tf.summary.graph(graph)

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


class WandbLogger:
    """Weights & Biases: the resolved config, every record as `<kind>/<name>` against `global_step`
    (so a resumed run may log a step again), one run per job, grouped by sweep.

    When the W&B servers cannot be reached, it warns and records offline instead of failing the
    training; `wandb sync <run_dir>/wandb/offline-run-*` uploads such a run later."""

    def __init__(self, run_dir: str, project: str, config: dict, run_id: str, name: str,
                 group: str | None = None, entity: str | None = None, mode: str | None = None,
                 tags: list[str] | None = None, init_timeout: float = 30.0, warn=print):
        import wandb

        self._wandb = wandb
        kwargs = dict(project=project, entity=entity, config=config, id=run_id, name=name, group=group,
                      tags=tags, dir=run_dir, resume="allow", mode=mode,
                      settings=wandb.Settings(init_timeout=init_timeout, console="off"))
        try:
            self.run = wandb.init(**kwargs)
        except Exception as err:  # no network, no login: keep training, record offline
            if mode == "offline":
                raise
            warn(f"warning: W&B could not start online ({type(err).__name__}: {err}); logging offline to {run_dir}/wandb. Upload later with `wandb sync`.")
            wandb.teardown()  # release the half-started online run before the offline one takes its id
            kwargs["mode"] = "offline"
            self.run = wandb.init(**kwargs)
        self.run.define_metric("global_step")
        self.run.define_metric("*", step_metric="global_step")

    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        self.run.log({"global_step": step, **{f"{kind}/{k}": v for k, v in metrics.items()}})

    def close(self) -> None:
        self.run.finish()
