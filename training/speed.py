"""The speed layer's decisions for this machine: the `speed` config group with its `auto` values
decided, TensorFlow's thread pools and its devices. Nothing here changes what an update computes."""
from __future__ import annotations

import os
from dataclasses import dataclass

from omegaconf import DictConfig

SMALL_NETWORK_WIDTH = 128  # `speed.threads.inter_op=auto`: one inter-op thread up to this many units


def auto_inter_op(hidden) -> int | None:
    """`speed.threads.inter_op=auto`: 1 for a network whose hidden layers are all at most
    SMALL_NETWORK_WIDTH units wide, else None (TF's default pool). A small network's update ops
    take microseconds, less than handing them to another thread costs; from 256 units the ops are
    worth spreading (TD3's twin critics run side by side). Without a `network.hidden` to judge by
    it keeps TF's default. Measured in labs/log.md."""
    try:
        widths = [int(h) for h in hidden]
    except (TypeError, ValueError):
        return None
    return 1 if widths and max(widths) <= SMALL_NETWORK_WIDTH else None


MIN_SHARD_ROWS = 128  # `speed.batch_shards=auto` cuts a batch only into shards at least this many rows long


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a cluster scheduler sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def auto_batch_shards(compile: str, hidden, batch_size: int, cores: int, gpus: int) -> int:
    """`speed.batch_shards=auto`: 2 when the update is a TF graph on CPU (`speed.compile=graph`, no GPU, at
    least 2 cores) of a network wider than SMALL_NETWORK_WIDTH units, and the batch splits into
    two shards of at least MIN_SHARD_ROWS rows; else 1. Each shard's forward and backward pass is
    then its own chain of ops, run side by side by the inter-op threads, with the cores divided
    among the shards (`auto_intra_op`) rather than every matmul split across all of them; shards
    under MIN_SHARD_ROWS rows gained nothing. Eager mode runs ops one at a time, XLA and GPUs run a batch's matmul as one kernel, and a small network's
    ops cost less than their dispatch, so none of them gains. Two shards is what was measured;
    more would make smaller matmuls. Measured in labs/log.md."""
    try:
        widest = max(int(h) for h in hidden)
    except (TypeError, ValueError):
        return 1
    fits = batch_size % 2 == 0 and batch_size // 2 >= MIN_SHARD_ROWS
    return 2 if compile == "graph" and not gpus and cores >= 2 and widest > SMALL_NETWORK_WIDTH and fits else 1


def auto_intra_op(batch_shards: int, cores: int) -> int | None:
    """`speed.threads.intra_op=auto`: with batch shards, each op gets the cores divided among the
    shards (1 on 2 cores), so the shards' chains do not fight over the same cores; without, None
    (TF's default: every core for every op)."""
    return max(1, cores // batch_shards) if batch_shards > 1 else None


def configure_threads(inter_op: int | None = None, intra_op: int | None = None, required: bool = True) -> None:
    """Size TensorFlow's thread pools (None: TF's default, about one thread per core). They are
    fixed once TF has run an op, so a size that differs from the one in place then is an error
    that says so (a process runs one config; tests that build several runs use one setting).
    With `required=False` the sizes are a speed hint (`auto`): one that can no longer be applied
    is left, not refused."""
    import tensorflow as tf

    from training.config import ConfigError

    for name, want, get, set_ in [
        ("inter_op", inter_op, tf.config.threading.get_inter_op_parallelism_threads,
         tf.config.threading.set_inter_op_parallelism_threads),
        ("intra_op", intra_op, tf.config.threading.get_intra_op_parallelism_threads,
         tf.config.threading.set_intra_op_parallelism_threads),
    ]:
        if want is None or get() == want:
            continue
        try:
            set_(want)
        except RuntimeError as err:
            if not required:
                continue
            raise ConfigError(
                f"speed.threads.{name}={want} cannot be applied: TensorFlow is already running with "
                f"{get() or 'its default'} threads in this process ({err}). Set it in a fresh process "
                f"(train.py does), or leave speed.threads.{name}=null."
            ) from err


def configure_devices() -> list[str]:
    """Let each process grow GPU memory as it needs it (so several jobs can share a GPU), before
    TensorFlow touches a device. Returns the names of the GPUs found."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialized: memory growth can no longer be changed
            pass
    return [g.name for g in gpus]


@dataclass(frozen=True)
class Speed:
    """The `speed` group with every `auto` decided."""

    compile: str = "graph"
    fuse_updates: bool = True
    steps_per_call: int = 0
    batch_shards: int = 1
    update_precision: str = "float32"
    numpy_acting: bool = True
    vectorization: str = "sync"
    inter_op: int | None = None
    intra_op: int | None = None


def gpu_count() -> int:
    import tensorflow as tf  # listing devices does not start TF's runtime: threads can still be set

    return len(tf.config.list_physical_devices("GPU"))


DRIVEN_STEPS = 1000  # `speed.steps_per_call=auto` on a CPU


def auto_compile(batch_statistics: bool) -> str:
    """`speed.compile=auto`: XLA for a network with batch statistics (Batch Renormalization:
    CrossQ), whose many small ops per layer TensorFlow's graph executor runs one by one and XLA
    fuses; graph mode for the rest, where XLA measured slower on a CPU. Measured in labs/log.md."""
    return "xla" if batch_statistics else "graph"


def decide(speed: DictConfig, hidden, batch_size: int, gpus: int | None = None, cores: int | None = None,
           batch_statistics: bool = False) -> Speed:
    """`speed` with its `auto` values decided for this machine (`gpus` and `cores` as found here
    unless given; `batch_statistics`: the network normalizes by its batch). On a GPU, `auto`
    chooses nothing CPU-specific: no shards, no thread sizes, and no env steps driven from inside
    the graph (its `numpy_function` is a host op)."""
    gpus = gpu_count() if gpus is None else gpus
    cores = available_cores() if cores is None else cores
    compile, numpy_acting = str(speed.compile), bool(speed.numpy_acting)
    if compile == "auto":
        compile = auto_compile(batch_statistics)
    threads = speed.get("threads") or {}
    inter_op = threads.get("inter_op")
    if inter_op == "auto":
        inter_op = None if gpus else auto_inter_op(hidden)
    shards = speed.batch_shards
    if shards == "auto":
        shards = 1 if inter_op == 1 else auto_batch_shards(compile, hidden, batch_size, cores, gpus)
    intra_op = threads.get("intra_op")
    if intra_op == "auto":
        intra_op = auto_intra_op(shards, cores) if compile == "graph" and inter_op != 1 else None
    steps = speed.steps_per_call
    if steps == "auto":
        steps = DRIVEN_STEPS if compile != "eager" and numpy_acting and not gpus else 0
    elif compile == "eager" or not numpy_acting:
        steps = 0  # the driver needs a compiled step and numpy acting; the per-phase path is the same steps
    return Speed(compile=compile, fuse_updates=bool(speed.fuse_updates), steps_per_call=int(steps),
                 batch_shards=int(shards), update_precision=str(speed.update_precision),
                 numpy_acting=numpy_acting, vectorization=str(speed.vectorization), inter_op=inter_op,
                 intra_op=intra_op)


def explicit_threads(speed: DictConfig) -> dict:
    """The thread pool sizes the config sets (not left to `auto`)."""
    return {k: v for k, v in (speed.get("threads") or {}).items() if v != "auto"}


def thread_pools(speed: DictConfig, decided: Speed) -> tuple[dict, dict]:
    """The sizes of TF's thread pools a run applies (None: TF's default): those the config sets,
    which are required, and those `auto` chose (`decided`), which are hints."""
    threads = speed.get("threads") or {}
    return explicit_threads(speed), {k: getattr(decided, k) for k, v in threads.items() if v == "auto"}


def apply_threads(speed: DictConfig, decided: Speed) -> None:
    required, hints = thread_pools(speed, decided)
    configure_threads(**required)
    configure_threads(**hints, required=False)
