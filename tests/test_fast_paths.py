"""The loop's fast paths change how fast a run goes, never what it computes: fused updates and
vector envs keep the update-to-data ratio, a fused run equals the same run update by update, and
a run whose env steps are driven from inside the compiled update (steps_per_call) equals the run
that calls the update from Python."""
import json
import signal

import numpy as np
import pytest
from omegaconf import OmegaConf

from buffers.types import Batch
from training.builder import build_run
from training.loggers import MultiLogger
from training.loop import train


class Calls:
    """Counts how the loop reaches the learner: calls of one update, of several fused, and batches."""

    def __init__(self, learner):
        self.update = self.update_many = 0
        self.batches = 0
        orig_update = learner.update

        def update(batches):
            k = len(batches.reward)
            self.update += k == 1
            self.update_many += k > 1
            self.batches += k
            return orig_update(batches)

        learner.update = update


def run(cfg):
    OmegaConf.resolve(cfg)
    parts = build_run(cfg)
    calls = Calls(parts.learner)
    try:
        summary = train(parts.learner, parts.buffer, parts.envs, parts.eval_env, parts.settings, MultiLogger([]),
                        driver=parts.driver)
        weights = [np.array(w) for w in parts.learner.agent.actor.get_weights()]
    finally:
        parts.close()
    return summary, calls, weights


# the per-phase paths: the loop calls the learner's update itself
COMMON = ["env=pendulum", "total_steps=480", "learning_starts=200", "eval_every=1000", "eval_episodes=1",
          "batch_size=32", "network.hidden=[32,32]", "deterministic=true", "logger.progress=false", "speed.steps_per_call=0"]


def test_fused_run_equals_the_same_run_update_by_update(make_cfg):
    fused, calls_f, w_fused = run(make_cfg(*COMMON, "train_every=8", "speed.fuse_updates=true"))
    plain, calls_p, w_plain = run(make_cfg(*COMMON, "train_every=8", "speed.fuse_updates=false"))
    assert fused["updates"] == plain["updates"] == 280
    assert calls_f.update == 0 and calls_f.update_many == 35 and calls_f.batches == 280
    assert calls_p.update_many == 0 and calls_p.update == 280
    for a, b in zip(w_fused, w_plain):  # same batches, same updates: the same actor
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert fused["final_return"] == pytest.approx(plain["final_return"], rel=1e-3)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
@pytest.mark.parametrize("updates_per_step", ["1", "0.5", "0.3"])  # 0.3: not exact in binary
def test_vector_envs_keep_the_update_to_data_ratio(make_cfg, vectorization, updates_per_step):
    summary, calls, _ = run(make_cfg(*COMMON, "num_envs=4", f"speed.vectorization={vectorization}",
                                     f"updates_per_step={updates_per_step}"))
    expected = round((480 - 200) * float(updates_per_step))
    assert summary["steps"] == 480 and summary["updates"] == calls.batches == expected
    # four transitions per loop iteration: their updates go in one call (fused when more than one)
    assert calls.update + calls.update_many == 70
    assert calls.update == 0 or updates_per_step == "0.3"  # 1.2 due a step: mostly one update


class Records:
    """A logger that keeps every record but the wall-clock ones."""

    def __init__(self):
        self.rows = []

    def log(self, kind, step, metrics):
        self.rows.append((kind, step, {k: v for k, v in metrics.items() if k not in ("wall_time", "steps_per_second")}))

    def close(self):
        pass


def run_recorded(cfg, stop_at=None):
    """A run with its log records, checkpoint requests (step, kind) and final acting weights;
    `stop_at`: a stop request (as a signal would make) from that step on."""
    from training.session import LoopHooks

    OmegaConf.resolve(cfg)
    parts = build_run(cfg)
    records, checkpoints = Records(), []
    driven = []
    if parts.driver is not None:
        orig = parts.driver.run

        def run(*args):
            driven.append(1)
            return orig(*args)

        parts.driver.run = run
    state = {}

    def checkpoint(st, kind):
        state["st"] = st
        checkpoints.append((st.step, kind))

    hooks = LoopHooks(checkpoint=checkpoint,
                      stop_requested=lambda: stop_at is not None and "st" in state and state["st"].step >= stop_at)
    try:
        from training.loop import initial_state
        state["st"] = initial_state(parts.envs, parts.settings)
        summary = train(parts.learner, parts.buffer, parts.envs, parts.eval_env, parts.settings, records,
                        state=state["st"], hooks=hooks, driver=parts.driver)
        acting = parts.learner.agent.acting
        weights = [np.array(w) for w in acting.network.get_weights()]
        numpy_weights = [np.array(w) for w in acting._weights]
    finally:
        parts.close()
    return dict(summary=summary, rows=records.rows, checkpoints=checkpoints, weights=weights,
                numpy_weights=numpy_weights, calls=len(driven), driver=parts.driver)


DRIVEN = [
    # TD3 with two envs, periodic checkpoints and a stop request between events
    (["agent=td3", "env=pendulum", "num_envs=2", "checkpoint.every=300", "logger.every=100", "total_steps=1500"], 1100),
    # DQN with prioritized replay, one update every 4 steps, updates fused per phase
    (["agent=dqn", "env=cartpole", "buffer=prioritized", "updates_per_step=0.25", "train_every=1",
      "logger.every=250", "checkpoint.every=0", "total_steps=1500"], None),
    # CrossQ: speed.compile=auto compiles its update with XLA, inside the driver's graph too (each
    # length of an update phase is a compile of its own: fewer steps)
    (["agent=crossq", "env=pendulum", "logger.every=250", "checkpoint.every=0", "total_steps=800"], None),
]


@pytest.mark.parametrize("overrides,stop_at", DRIVEN)
def test_a_run_driven_from_inside_the_graph_equals_the_run_driven_from_python(make_cfg, overrides, stop_at):
    common = [*overrides, "learning_starts=300", "eval_every=500", "eval_episodes=2",
              "batch_size=32", "network.hidden=[32,32]", "deterministic=true", "logger.progress=false"]
    driven = run_recorded(make_cfg(*common, "speed.steps_per_call=400"), stop_at)
    plain = run_recorded(make_cfg(*common, "speed.steps_per_call=0"), stop_at)
    assert plain["calls"] == 0 and driven["calls"] > 0
    # one call per stretch between events (eval, log, checkpoint, stop, or steps_per_call steps)
    events = len([r for r in plain["rows"] if r[0] in ("eval", "update")]) + len(plain["checkpoints"])
    assert driven["calls"] <= events + driven["summary"]["steps"] // 400
    assert driven["summary"]["steps"] == plain["summary"]["steps"]
    assert driven["summary"]["updates"] == plain["summary"]["updates"] > 0
    assert driven["summary"]["stopped"] == plain["summary"]["stopped"] == (stop_at is not None)
    assert driven["checkpoints"] == plain["checkpoints"]
    assert [r[:2] for r in driven["rows"]] == [r[:2] for r in plain["rows"]]  # same records at the same steps
    for (kind, step, a), (_, _, b) in zip(driven["rows"], plain["rows"]):
        assert a.keys() == b.keys(), (kind, step)
        np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=1e-5, err_msg=f"{kind} at {step}")
    for a, b, n in zip(driven["weights"], plain["weights"], driven["numpy_weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(n, a)  # numpy acting holds the last update's weights
    assert driven["driver"]._fn.experimental_get_tracing_count() == 1  # traced once per run


@pytest.mark.parametrize("steps_per_call", ["0", "1000"])
def test_a_stop_request_at_the_last_step_lets_the_run_finish(make_cfg, steps_per_call):
    """A signal that lands in the loop's last iteration must not leave a run stopped at
    total_steps, without its final evaluation, that resume then refuses as already finished."""
    cfg = make_cfg(*COMMON[:-1], "eval_every=240", f"speed.steps_per_call={steps_per_call}")
    result = run_recorded(cfg, stop_at=480)
    assert result["summary"]["stopped"] is False and result["summary"]["steps"] == 480
    assert result["checkpoints"][-1] == (480, "final")
    assert [step for kind, step, _ in result["rows"] if kind == "eval"] == [0, 240, 480]


def test_a_driven_call_returns_within_steps_per_call_env_steps(make_cfg):
    # no event for the whole run: only steps_per_call ends a call (and bounds a stop signal's wait)
    cfg = make_cfg("agent=dqn", "env=cartpole", "total_steps=1300", "learning_starts=300", "eval_every=100000",
                   "logger.every=100000", "checkpoint.every=0", "batch_size=16", "network.hidden=[16,16]",
                   "speed.steps_per_call=100", "num_envs=2", "logger.progress=false")
    OmegaConf.resolve(cfg)
    parts = build_run(cfg)
    stretches, orig = [], parts.driver.run

    def run(*args):
        before = len(parts.buffer)
        try:
            return orig(*args)
        finally:
            stretches.append(len(parts.buffer) - before)

    parts.driver.run = run
    try:
        summary = train(parts.learner, parts.buffer, parts.envs, parts.eval_env, parts.settings, MultiLogger([]),
                        driver=parts.driver)
    finally:
        parts.close()
    assert summary["steps"] == 1300 and sum(stretches) == 1000
    assert stretches == [100] * 10  # 50 steps of 2 envs each


def test_a_source_error_reaches_the_caller_as_itself(make_cfg):
    """The driver draws the batches its source says are due and hands their priorities back to the
    buffer; an error of the source (an env that went away) reaches the caller as itself."""
    cfg = make_cfg("agent=dqn", "env=cartpole", "buffer=prioritized", "network.hidden=[16,16]", "batch_size=8",
                   "logger.progress=false")
    OmegaConf.resolve(cfg)
    parts = build_run(cfg)
    rng = np.random.default_rng(0)
    for _ in range(50):
        parts.buffer.add(rng.normal(size=(1, 4)).astype(np.float32), rng.integers(0, 2, 1), rng.normal(size=1),
                         rng.normal(size=(1, 4)).astype(np.float32), np.zeros(1, bool), np.zeros(1, bool))
    priorities = []
    update = parts.buffer.update_priorities
    parts.buffer.update_priorities = lambda td_error: (priorities.append(np.array(td_error)), update(td_error))
    calls = []

    def source():
        calls.append(1)
        if len(calls) == 3:
            raise KeyError("the env went away")
        return 1, True

    try:
        with pytest.raises(KeyError, match="the env went away"):
            parts.driver.run(source, parts.buffer, 8)
    finally:
        parts.close()
    assert [p.shape for p in priorities] == [(8,), (8,)]  # each batch's errors back before the next call
    assert int(parts.learner.agent.updates.numpy()) == 2


def test_thread_pools_that_can_no_longer_change_are_refused_clearly():
    import tensorflow as tf

    from training.config import ConfigError
    from training.speed import configure_threads

    tf.constant(1.0) + 1.0  # TF is running: its pools are fixed
    current = tf.config.threading.get_inter_op_parallelism_threads()
    configure_threads(inter_op=current or None)  # what is in place already is fine
    with pytest.raises(ConfigError, match=r"speed.threads.inter_op=\d+ cannot be applied: TensorFlow is already running"):
        configure_threads(inter_op=current + 3)


def test_auto_inter_op_picks_one_thread_only_for_small_networks():
    from training.speed import auto_inter_op

    assert auto_inter_op([64, 64]) == 1
    assert auto_inter_op([128, 32]) == 1
    assert auto_inter_op([256, 256]) is None
    assert auto_inter_op([64, 400]) is None  # the widest layer decides
    assert auto_inter_op(None) is None  # a network without `hidden`: TF's default
    assert auto_inter_op([]) is None


def test_auto_inter_op_is_a_hint_once_tf_runs():
    import tensorflow as tf

    from training.speed import configure_threads

    tf.constant(1.0) + 1.0  # TF is running: its pools are fixed
    current = tf.config.threading.get_inter_op_parallelism_threads()
    configure_threads(inter_op=current + 3, required=False)  # left as it is, no error
    assert tf.config.threading.get_inter_op_parallelism_threads() == current


def test_auto_batch_shards_cut_a_wide_networks_batch_in_graph_mode_on_cpu():
    from training.speed import auto_batch_shards, auto_intra_op

    assert auto_batch_shards("graph", [256, 256], 256, cores=2, gpus=0) == 2
    assert auto_batch_shards("graph", [64, 400], 512, cores=8, gpus=0) == 2  # the widest layer decides
    assert auto_batch_shards("eager", [256, 256], 256, cores=2, gpus=0) == 1
    assert auto_batch_shards("xla", [256, 256], 256, cores=2, gpus=0) == 1
    assert auto_batch_shards("graph", [256, 256], 256, cores=2, gpus=1) == 1
    assert auto_batch_shards("graph", [256, 256], 256, cores=1, gpus=0) == 1
    assert auto_batch_shards("graph", [64, 64], 256, cores=2, gpus=0) == 1  # small ops: dispatch-bound
    assert auto_batch_shards("graph", [256, 256], 128, cores=2, gpus=0) == 1  # shards under 128 rows
    assert auto_batch_shards("graph", [256, 256], 255, cores=2, gpus=0) == 1  # no equal shards
    assert auto_batch_shards("graph", None, 256, cores=2, gpus=0) == 1
    assert auto_intra_op(2, cores=2) == 1 and auto_intra_op(2, cores=8) == 4 and auto_intra_op(2, cores=3) == 1
    assert auto_intra_op(1, cores=2) is None  # no shards: TF's default


def test_auto_chooses_nothing_cpu_specific_on_a_gpu(make_cfg):
    """On a GPU `auto` gives no shards, no thread sizes and no env steps driven through the
    graph's host op; on a CPU the defaults turn all three on for TD3 256-256. Explicit values stay."""
    from training.speed import decide

    speed = make_cfg("agent=td3", "env=ant").speed
    cpu = decide(speed, [256, 256], 256, gpus=0, cores=2)
    gpu = decide(speed, [256, 256], 256, gpus=1, cores=2)
    assert (cpu.batch_shards, cpu.steps_per_call, cpu.intra_op) == (2, 1000, 1)
    assert (gpu.batch_shards, gpu.steps_per_call, gpu.inter_op, gpu.intra_op) == (1, 0, None, None)
    assert decide(make_cfg("speed.steps_per_call=500").speed, [256, 256], 256, gpus=1, cores=2).steps_per_call == 500
    # the driver needs a compiled step and numpy acting; elsewhere the loop's per-phase path runs the same steps
    for preset in ("speed=eager", "speed.numpy_acting=false"):
        assert decide(make_cfg(preset, "speed.steps_per_call=500").speed, [256, 256], 256, 0, 2).steps_per_call == 0
    assert decide(make_cfg("speed=xla", "speed.steps_per_call=500").speed, [256, 256], 256, 0, 2).steps_per_call == 500


def test_auto_compiles_a_network_with_batch_statistics_with_xla(make_cfg):
    """`speed.compile=auto` (speed=fast): XLA fuses Batch Renormalization's many small ops, which the
    graph executor runs one by one; graph mode for every other network. XLA steps are driven too."""
    from training.builder import decide_speed

    crossq, td3 = decide_speed(make_cfg("agent=crossq", "env=pendulum")), decide_speed(make_cfg("agent=td3"))
    assert (crossq.compile, td3.compile) == ("xla", "graph")
    assert crossq.steps_per_call == td3.steps_per_call == 1000 and crossq.batch_shards == 1
    assert decide_speed(make_cfg("agent=crossq", "env=pendulum", "speed=plain")).compile == "graph"


# The sizes a run gives TF's thread pools on 2 cores (0: TF's default)
POOLS = [
    (["agent=dqn", "env=cartpole", "network.hidden=[64,64]"], 1, 0),  # auto: one inter-op thread for a small network
    (["agent=dqn", "env=cartpole", "network.hidden=[256,256]"], 0, 0),
    (["agent=dqn", "env=cartpole", "network.hidden=[64,64]", "speed.threads.inter_op=null"], 0, 0),
    (["agent=dqn", "env=cartpole", "network.hidden=[64,64]", "speed.batch_shards=2"], 1, 0),  # auto inter_op 1
    (["agent=td3", "env=pendulum"], 0, 1),  # 256-256, batch 256, graph mode: two shards, a core each
    (["agent=td3", "env=pendulum", "speed.threads.inter_op=3"], 3, 1),
    (["agent=td3", "env=pendulum", "speed.batch_shards=1"], 0, 0),
    (["agent=td3", "env=pendulum", "speed.threads.intra_op=null"], 0, 0),
    (["agent=td3", "env=pendulum", "speed.compile=eager"], 0, 0),
    (["agent=td3", "env=pendulum", "speed.threads.inter_op=1"], 1, 0),  # one inter-op thread: no shards
]


@pytest.mark.parametrize("overrides, inter_op, intra_op", POOLS)
def test_a_run_sizes_tfs_thread_pools_from_its_config_and_the_cores(make_cfg, overrides, inter_op, intra_op):
    from training.builder import decide_speed
    from training.speed import thread_pools

    cfg = make_cfg(*overrides)
    required, hints = thread_pools(cfg.speed, decide_speed(cfg, cores=2))
    assert not required.keys() & hints.keys()
    sizes = {"inter_op": 0, "intra_op": 0, **{k: v or 0 for k, v in {**required, **hints}.items()}}
    assert sizes == {"inter_op": inter_op, "intra_op": intra_op}


@pytest.mark.parametrize("overrides, inter_op, intra_op", [POOLS[0], POOLS[4], POOLS[5]])
def test_a_fresh_run_gives_tfs_thread_pools_those_sizes(overrides, inter_op, intra_op):
    """What the run decides reaches TensorFlow in a process of its own (the pools are fixed once TF
    runs): an auto inter-op size, an auto intra-op size from the batch shards, a size the config sets."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys\n"
        "from training.builder import build_run\n"
        "from training.config import compose_config\n"
        "build_run(compose_config(sys.argv[1:])).close()\n"
        "import tensorflow as tf; print('inter_op', tf.config.threading.get_inter_op_parallelism_threads())\n"
        "print('intra_op', tf.config.threading.get_intra_op_parallelism_threads())\n"
    )
    # on 2 of the machine's cores, the table's: the test workers each run on cores of their own (conftest.py)
    if (os.cpu_count() or 1) < 2:
        pytest.skip("the table's sizes are for 2 cores; this machine has 1")
    proc = subprocess.run([sys.executable, "-c", code, *overrides], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300,
                          preexec_fn=lambda: os.sched_setaffinity(0, range(2)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {f"inter_op {inter_op}", f"intra_op {intra_op}"} <= set(proc.stdout.splitlines())


def test_a_network_that_acts_through_tf_is_never_driven(make_cfg):
    """The driver acts from inside its numpy_function; a network acting through TF (a dueling head
    did, before numpy learnt it; speed.numpy_acting=false does) there waited for ever on the one
    inter-op thread `auto` gives a small network (train.py hung past learning_starts). Such a run
    takes the per-phase path, and still trains."""
    from helpers import run_loop

    cfg = make_cfg("agent=dqn", "env=cartpole", "speed.numpy_acting=false", "network.hidden=[16,16]", "total_steps=400",
                   "learning_starts=200", "eval_every=400", "eval_episodes=1", "logger.progress=false")
    summary, run = run_loop(cfg)
    assert not run.learner.agent.acting.in_numpy
    assert run.speed.steps_per_call == 0 and run.driver is None
    assert summary["steps"] == 400 and summary["updates"] > 0


def test_the_compiled_update_is_entered_through_tfs_flat_call():
    """`ConcreteCall` enters a traced function through its concrete function's `_call_flat`, a
    private TensorFlow entry (TF is pinned to 2.21.x), because `tf.function.__call__` re-binds and
    re-flattens the arguments on every call: 2.1 ms of a 7.3 ms TD3 update on Ant (labs/log.md).
    Should a TensorFlow upgrade drop or change it, ConcreteCall falls back to the public call, the
    update stays right and only the time is lost: this test says so, instead of the slowdown passing
    unseen. Both entries must give the same outputs, from one trace."""
    import tensorflow as tf

    from agents.compiling import ConcreteCall

    fn = tf.function(lambda b: {"sum": b.obs + b.reward[:, None], "n": tf.shape(b.obs)[0]},
                     input_signature=[Batch(*(tf.TensorSpec([None, 2] if k in ("obs", "next_obs", "action") else [None],
                                                           tf.float32) for k in Batch._fields))])
    call = ConcreteCall(fn)
    rng = np.random.default_rng(0)
    batch = Batch(*(rng.normal(size=(3, 2) if k in ("obs", "next_obs", "action") else 3).astype(np.float32)
                    for k in Batch._fields))
    fast = call(batch)
    assert call._flat_call is not None, "TF's _call_flat is gone or changed: ConcreteCall fell back to the public call"
    public = fn(batch)
    np.testing.assert_array_equal(fast["sum"], public["sum"])
    assert int(fast["n"]) == 3 and fn.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("steps_per_call", ["0", "100000"])
def test_a_signal_is_honoured_at_the_next_env_step_even_inside_a_driven_call(cli, tmp_path, steps_per_call):
    # one driven call would run from learning_starts to the end: nothing but the signal stops it
    proc = cli.train(tmp_path / "run", "agent=dqn", "env=cartpole", "env.id=signalling_env:SignalsAt-v0", "+env.kwargs.base=CartPole-v1",
                     "+env.kwargs.at=700",
                     "total_steps=3000", "learning_starts=300", "eval_every=100000", "eval_episodes=1",
                     "logger.every=100000", "checkpoint.every=0", "batch_size=16", "network.hidden=[16,16]",
                     f"speed.steps_per_call={steps_per_call}", "logger.progress=false")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]  # a stopped run's exit, as a shell's
    assert "stopped by SIGTERM at step 700" in proc.stdout
    assert sorted(d.name for d in (tmp_path / "run" / "checkpoints").iterdir()) == ["best", "step_0000000700"]


@pytest.mark.parametrize("steps_per_call", ["0", "1000"])
def test_a_run_stopped_inside_an_update_phase_does_the_rest_first_when_it_continues(cli, tmp_path, steps_per_call):
    # prioritized replay: the 4 updates due every 4th step are 4 batches, a stop can fall between them
    from helpers import final_weights

    common = ["agent=dqn", "env=cartpole", "buffer=prioritized", "train_every=4", "updates_per_step=1",
              "total_steps=1000", "learning_starts=300", "eval_every=100000", "eval_episodes=1", "checkpoint.every=0",
              "batch_size=16", "network.hidden=[16,16]", "deterministic=true", f"speed.steps_per_call={steps_per_call}",
              "logger.progress=false"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert cli.train(whole, *common).returncode == 0
    proc = cli.train(stopped, *common, "env.id=signalling_env:SignalsAt-v0", "+env.kwargs.base=CartPole-v1",
                     "+env.kwargs.at=700")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    state = json.loads((stopped / "checkpoints" / "step_0000000700" / "state.json").read_text())
    assert state["loop"]["pending"] == 3 and state["loop"]["updates"] == 400  # counted when due
    proc = cli.resume(stopped)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = final_weights(whole), final_weights(stopped)
    assert a.keys() == b.keys()
    for k in set(a) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}:  # names Keras made unique within this process
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
