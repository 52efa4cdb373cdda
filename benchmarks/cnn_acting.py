"""One observation's forward pass of each CNN, as acting runs it: in numpy on the network's weights
(`networks.numpy_forward`) against a tf.function call, microseconds per act (median of rounds).

    uv run python benchmarks/cnn_acting.py
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agents.acting import Forward
from networks.cnn import conv_net, impala_cnn

NETWORKS = {
    "nature (84x84x4)": (lambda: conv_net((84, 84, 4), 6), (84, 84, 4)),
    "nature, dueling": (lambda: conv_net((84, 84, 4), 6, dueling=True), (84, 84, 4)),
    "minatar (10x10x7)": (lambda: conv_net((10, 10, 7), 6, convs=[[16, 3, 1]], hidden=[128]), (10, 10, 7)),
    "impala (84x84x4)": (lambda: impala_cnn((84, 84, 4), 6), (84, 84, 4)),
}


def per_act_us(forward: Forward, obs: np.ndarray, calls: int = 200, rounds: int = 5) -> float:
    for _ in range(20):
        forward(obs)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            forward(obs)
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    rng = np.random.default_rng(0)
    print("| network | acts in | numpy (us) | tf.function (us) |")
    print("|---|---|---|---|")
    for name, (build, shape) in NETWORKS.items():
        net = build()
        fast, tf_call = Forward(net, numpy=True), Forward(net, numpy=False)
        obs = rng.integers(0, 256, (1, *shape)).astype(np.uint8)
        numpy_us = per_act_us(fast, obs) if fast.in_numpy else float("nan")
        print(f"| {name} | {'numpy' if fast.in_numpy else 'TF'} | {numpy_us:.0f} | {per_act_us(tf_call, obs):.0f} |")


if __name__ == "__main__":
    main()
