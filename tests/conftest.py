import os
import sys

os.environ.setdefault("WANDB_MODE", "offline")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from training.runtime import prepare_process  # noqa: E402


def pin_worker_to_its_cores() -> None:
    """Under pytest-xdist, each worker (and every process it starts) runs on cores of its own, as a
    cluster job does: TensorFlow sizes its thread pools from the cores it may use, so two workers
    do not each spread every op over all the cores and spin-wait on each other's."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker is None or count < 2 or len(cores) < count:
        return
    os.sched_setaffinity(0, cores[int(worker.removeprefix("gw")) % count::count])


pin_worker_to_its_cores()

prepare_process()  # before any test imports TensorFlow or Keras; the subprocesses inherit it

import pytest  # noqa: E402


def pytest_collection_modifyitems(items):
    """The learning tests (`slow`) first: the workers take the longest tests while the short ones
    are left to fill in after, instead of one worker finishing a long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: otherwise as collected


@pytest.fixture
def make_cfg():
    """Compose the run config from conf/ with the given overrides, as train.py would."""

    from training.config import compose_config

    return lambda *overrides: compose_config(overrides)


@pytest.fixture
def cli(capsys):
    """train.py, resume and evaluate.py run in this process, for commands refused before training
    (helpers.InProcess): no second TensorFlow import per command."""
    from helpers import InProcess

    return InProcess(capsys)


KERNEL_OPS = {"MatMul", "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"}


@pytest.fixture
def kernel_dtypes():
    """The dtypes of the matmuls and convolutions (forward and backward) in a graph and in the
    functions it calls (tf.cond branches, while-loop bodies): what `update_precision` decides."""

    def _dtypes(graph) -> set:
        graphs = [graph, *(f.graph for f in graph._functions.values() if hasattr(f, "graph"))]
        return {op.get_attr("T") for g in graphs for op in g.get_operations() if op.type in KERNEL_OPS}

    return _dtypes


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """A short uninterrupted TD3 run (helpers.RUN) that the checkpoint, evaluate, export, logger and
    resume tests read or continue from: trained once per test process, never written to."""
    from helpers import train

    run_dir = tmp_path_factory.mktemp("reference")
    proc = train(run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir
