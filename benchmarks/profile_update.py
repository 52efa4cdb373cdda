"""Where an update's time goes, op by op, from TensorFlow's profiler: K updates one call each
against the same K fused into one call (agent.update with K stacked batches), and the float32 and bfloat16 matmul
peaks of this machine for comparison, with the floor they set: the update's matmul multiply-adds
(counted from its graph, a conditional step weighted by how often it runs) at the float32 peak.

    uv run python benchmarks/profile_update.py agent=td3 env=ant
    uv run python benchmarks/profile_update.py agent=dqn env=cartpole network.hidden=[64,64] batch_size=64 --k 64

Takes train.py's overrides. The buffer is filled with random transitions of the real env. Prints,
for each way of calling, the wall time per update and the ops with the most time per update
(summed over TF's threads), read from the profiler's XSpace protobuf.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from training.runtime import prepare_process  # noqa: E402

prepare_process()  # before TensorFlow or Keras is imported anywhere

import argparse  # noqa: E402
import collections  # noqa: E402
import glob  # noqa: E402
import tempfile  # noqa: E402


def matmul_gflops(dtype, n: int, k: int, m: int, reps: int = 50) -> float:
    """Peak of a chain of `reps` (n x k) @ (k x m) matmuls in one tf.function, median of 7."""
    import tensorflow as tf

    from benchmarks.throughput import per_call

    a = tf.cast(tf.random.normal([n, k]), dtype)
    b = tf.cast(tf.random.normal([k, m]), dtype)

    @tf.function
    def chain(a, b):
        total = tf.constant(0.0, dtype)
        for _ in range(reps):
            total += tf.reduce_sum(tf.matmul(a, b))
            a = a + tf.constant(1e-6, dtype)
        return total

    return reps * 2 * n * k * m / per_call(lambda: chain(a, b).numpy(), 1, 7) / 1e9


def matmul_flops(graph) -> tuple[float, float]:
    """(FLOPs of the MatMul and BatchMatMul ops of `graph` itself, of the functions it calls): each
    2 * rows * inner * cols from the static shapes. A conditional step's ops (a policy delay's
    actor step) are in the called functions."""
    def count(g) -> float:
        total = 0.0
        for op in g.get_operations():
            if op.type not in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
                continue
            a, b = (t.shape.as_list() for t in op.inputs[:2])
            if op.type == "MatMul":
                a = a[::-1] if op.get_attr("transpose_a") else a
                b = b[::-1] if op.get_attr("transpose_b") else b
            else:
                a = a[:-2] + a[-2:][::-1] if op.get_attr("adj_x") else a
                b = b[:-2] + b[-2:][::-1] if op.get_attr("adj_y") else b
            batch = 1
            for d in a[:-2]:
                batch *= d
            total += 2.0 * batch * a[-2] * a[-1] * b[-1]
        return total

    called = [f.graph for f in graph._functions.values() if hasattr(f, "graph")]
    return count(graph), sum(count(g) for g in called)


def op_times(fn, updates: int, top: int) -> list[tuple[float, int, str]]:
    """(ms per update, count, op name) of the ops that took most time in one profiled `fn()`."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        fn()
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    spent, count = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):  # TF's op threads, not the Python side
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name.startswith(("ExecutorState", "ExecutorDoneCallback", "ParallelFor")):
                    continue
                spent[name] += event.duration_ps / 1e9
                count[name] += 1
    return [(ms / updates, count[name], name) for name, ms in spent.most_common(top)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*")
    p.add_argument("--k", type=int, default=16, help="updates per measurement")
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()

    import tensorflow as tf
    from benchmarks.throughput import per_call, random_transitions
    from training.builder import build_run
    from training.config import compose_config
    from training.speed import configure_threads, explicit_threads

    cfg = compose_config(a.overrides)
    # the run's thread pools before the peaks below run TF's first ops (they are fixed from then on)
    configure_threads(**explicit_threads(cfg.speed))
    peak = 0.0
    for dtype in (tf.float32, tf.bfloat16):
        peaks = {shape: matmul_gflops(dtype, *shape) for shape in [(256, 256, 256), (1024, 1024, 1024)]}
        print(f"matmul peak {dtype.name}: " + ", ".join(f"{'x'.join(map(str, s))} {g:.0f} GFLOP/s" for s, g in peaks.items()))
        peak = peak or max(peaks.values())

    run = build_run(cfg)
    for transition in random_transitions(run.envs, max(5000, int(cfg.batch_size) * a.k)):
        run.buffer.add(*transition)
    batch_size, agent = int(cfg.batch_size), run.learner
    one = run.learner.replay.draw(run.buffer, batch_size, 1)
    many = run.learner.replay.draw(run.buffer, batch_size, a.k)
    # one update traced again on this batch's own shapes (the compiled one leaves the batch size open)
    first = tf.nest.map_structure(lambda x: tf.convert_to_tensor(x[0]), one)  # a Batch, or an agent's nested draw
    own, called = matmul_flops(tf.function(agent.agent.update).get_concrete_function(first).graph)
    every = int(cfg.agent.get("policy_delay", 1) or 1)  # a delayed step's functions run every `every`-th update
    flops = own + called / every
    print(f"\nmatmul work per update: {flops / 1e9:.3f} GFLOP ({own / 1e9:.3f} every update, {called / 1e9:.3f} in "
          f"called functions, counted 1/{every}); at the float32 peak: {1e3 * flops / (peak * 1e9):.3f} ms (the floor)")
    ways = {"one call per update": lambda: [agent.update(one) for _ in range(a.k)],
            f"{a.k} fused in one call": lambda: agent.update(many)}
    for name, fn in ways.items():
        ms = 1e3 * per_call(fn, 1, 5) / a.k  # its first call traces, untimed
        print(f"\n{name}: {ms:.3f} ms per update (median of 5); ops by time per update:")
        for op_ms, count, op in op_times(fn, a.k, a.top):
            print(f"  {op_ms:8.3f} ms  x{count / a.k:5.2f}  {op[:110]}")
    run.close()


if __name__ == "__main__":
    main()
