"""GPU readiness, checked without a GPU: every op of every agent's compiled update (its function
library, tf.cond branches and while-loop bodies included) has a kernel registered for the GPU (a
kernel registered for DEFAULT covers it), so on a GPU the update runs there without host round
trips. The only deliberate host ops are the graph driver's (training/driven.py's HOST_OPS), which
`speed.steps_per_call=auto` turns off on a GPU (tests/test_fast_paths.py)."""
import functools

import numpy as np
import pytest
from tensorflow.python.framework import kernels

import registry
from agents.dqn import DQN
from helpers import compiled
from networks.mlp import dueling_mlp

STRUCTURAL = {"Placeholder", "NoOp"}  # graph plumbing: placed by the runtime, no kernel of their own to run


def graph_ops(graph) -> set[str]:
    """The op types of a graph and of every function it calls."""
    graph_def = graph.as_graph_def()
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        ops |= {node.op for node in function.node_def}
    names = {f.signature.name for f in graph_def.library.function}
    return ops - names  # a call of a library function shows as an op named after it


def without_gpu_kernel(ops: set[str]) -> set[str]:
    def on_gpu(op):
        return any(k.device_type in ("GPU", "DEFAULT") for k in kernels.get_registered_kernels_for_op(op).kernel)

    return {op for op in ops - STRUCTURAL if not on_gpu(op)}


SPEEDS = {"plain": {}, "shards_bf16": {"batch_shards": 2, "update_precision": "bfloat16"}}


@pytest.mark.parametrize("speed", list(SPEEDS))
@pytest.mark.parametrize("name", [*registry.UPDATING, "dqn_dueling_soft", "mrq_author_schedule"])
def test_every_op_of_the_compiled_update_has_a_gpu_kernel(name, speed):
    if name == "dqn_dueling_soft":  # DQN's other network and its soft target update
        learner = compiled(DQN(3, 4, functools.partial(dueling_mlp, hidden=[8, 8]), np.random.default_rng(0), tau=0.5),
                           **SPEEDS[speed])
    elif name == "mrq_author_schedule":  # MR.Q's default: its encoder trains in a block call of its own
        learner = registry.build("mrq", encoder_schedule="author", **SPEEDS[speed])
    else:
        learner = registry.build(name, **SPEEDS[speed])
    single = learner.update_graph()
    fused = learner._update_many.get_concrete_function().graph
    blocks = [learner.block_graph()] if getattr(learner, "block", None) is not None else []
    assert len(blocks) == (name == "mrq_author_schedule")
    for graph in (single, fused, *blocks):
        ops = graph_ops(graph)
        assert "MatMul" in ops and len(ops) > 20  # the walk reached the maths
        assert without_gpu_kernel(ops) == set()
    assert "While" in graph_ops(fused) or "StatelessWhile" in graph_ops(fused)


def test_the_graph_driver_holds_exactly_its_declared_host_ops(make_cfg):
    """The driven env loop reaches numpy through PyFunc (a host op per env step on a GPU); nothing
    else in it lacks a GPU kernel. A new host op shows here."""
    from omegaconf import OmegaConf

    from training.builder import build_run
    from training.driven import HOST_OPS

    cfg = make_cfg("agent=td3", "env=pendulum", "network.hidden=[8,8]", "speed.steps_per_call=100")
    OmegaConf.resolve(cfg)
    run = build_run(cfg, with_buffer=False)
    try:
        missing = without_gpu_kernel(graph_ops(run.driver.graph()))
    finally:
        run.close()
    assert missing and missing <= set(HOST_OPS), missing


def test_the_check_finds_an_op_without_a_gpu_kernel():
    assert without_gpu_kernel({"PyFunc", "MatMul"}) == {"PyFunc"}
