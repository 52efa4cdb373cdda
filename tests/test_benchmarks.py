"""benchmarks/throughput.py runs for every agent and reports every part. (Its figures are for
benchmarks/README.md and labs/, not asserted here: the machines are shared and noisy.)"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("agent,env,extra", [  # a continuous agent on two envs, a discrete one on one
    ("td3", "pendulum", ["num_envs=2", "network.hidden=[32,32]", "batch_size=64"]),
    ("dqn", "cartpole", ["network.hidden=[64,64]", "batch_size=64", "updates_per_step=0.25", "train_every=4"]),
])
def test_throughput_benchmark_runs_and_reports_every_part(tmp_path, agent, env, extra):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "benchmarks/throughput.py", f"agent={agent}", f"env={env}", *extra,
           "bench.modes=[eager,graph]", "bench.repeats=2", "bench.loop_steps=100", "bench.warmup=300",
           "bench.buffer_fill=2000", "bench.fuse=4", f"bench.output={out}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| measure | eager | graph |" in proc.stdout and "| loop_steps_per_s |" in proc.stdout
    report = json.loads(out.read_text())
    graph = report["results"]["graph"]
    for key in ("env_step_us", "act_one_us", "act_batch256_us", "buffer_add_us", "sample_us", "update_ms",
                "fused_x4_update_ms", "loop_steps_per_s", "loop_overhead_in_loop", "parts_us_per_step"):
        assert graph[key] > 0 or key == "loop_overhead_in_loop", key
    assert graph["update_traces"] == 1
    shares = [v for k, v in graph.items() if k.startswith("loop_share_")]
    assert 0.5 < sum(shares) <= 1.0  # the timed parts are most of a step, never more than all of it
    assert report["acting"]["numpy_forward_one_us"] > 0 and report["acting"]["act_one_tf_function_us"] > 0


def test_loop_ab_measures_every_variant_in_one_process(tmp_path):
    out = tmp_path / "ab.json"
    cmd = [sys.executable, "benchmarks/loop_ab.py", "agent=td3", "env=pendulum", "network.hidden=[16,16]",
           "batch_size=16", "--variants", "", "speed.steps_per_call=0", "--rounds", "2", "--steps", "60",
           "--intervals", "2", "--warmup", "100", "--output", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| (as is) |" in proc.stdout and "| speed.steps_per_call=0 |" in proc.stdout
    rates = json.loads(out.read_text())["env_steps_per_s"]
    assert set(rates) == {"", "speed.steps_per_call=0"}
    assert all(len(r["rounds"]) == 2 and r["median"] > 0 for r in rates.values())


def test_profile_update_reads_the_ops_of_both_ways_of_calling():
    cmd = [sys.executable, "benchmarks/profile_update.py", "agent=dqn", "env=cartpole", "network.hidden=[16,16]",
           "batch_size=16", "--k", "2", "--top", "3"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "matmul peak float32" in proc.stdout and "matmul peak bfloat16" in proc.stdout
    assert "one call per update:" in proc.stdout and "2 fused in one call:" in proc.stdout
    assert proc.stdout.count("MatMul") >= 2  # the profiler saw the update's matmuls, both ways


def test_cold_step_times_the_env_step_in_each_condition():
    cmd = [sys.executable, "labs/cold_step/cold_step.py", "agent=td3", "env=pendulum", "network.hidden=[16,16]",
           "batch_size=16", "--steps", "5", "--rounds", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.startswith("| ") and "before it" not in line]
    names = [r[1].strip() for r in rows]
    assert len(names) == 3 and names[:2] == ["back to back", "after an update"]
    assert names[2].startswith("after a ") and names[2].endswith(" ms sleep")
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)


def test_bootstrap_noise_reports_each_number_of_replicates():
    cmd = [sys.executable, "labs/bootstrap_noise/bootstrap_noise.py", "--reps", "50", "200", "--seeds", "3"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| ") and "reps" not in line]
    assert [int(r[0]) for r in rows] == [50, 200]
    assert all(float(x) > 0 for r in rows for x in [*r[1].split(","), *r[2].split(","), r[3]])


def test_throughput_can_time_the_update_alone(tmp_path):
    """`bench.only=update` (compare_sb3.py --updates) times sampling and the update, one per call and
    fused, and nothing of the loop; an unknown `bench.only` is refused with the choices."""
    out = tmp_path / "u.json"
    base = [sys.executable, "benchmarks/throughput.py", "agent=td3", "env=pendulum", "network.hidden=[16,16]",
            "batch_size=16", "bench.modes=[graph]", "bench.repeats=2", "bench.buffer_fill=2000", "bench.fuse=4"]
    proc = subprocess.run([*base, "bench.only=update", f"bench.output={out}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    graph = json.loads(out.read_text())["results"]["graph"]
    assert graph["update_ms"] > 0 and graph["fused_x4_update_ms"] > 0 and graph["sample_us"] > 0
    assert graph["update_traces"] == 1
    assert not any(k.startswith(("loop_", "env_step", "act_")) for k in graph), sorted(graph)

    proc = subprocess.run([*base, "bench.only=updates"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0
    assert "bench.only='updates' is not a measurement" in proc.stderr and "bench.only=update" in proc.stderr


def test_throughput_can_time_the_loop_alone_without_part_timers(tmp_path):
    """`bench.only=loop` (compare_sb3.py's loop side) measures the loop without the wrappers that
    time its parts, so it reports no parts and no shares."""
    out = tmp_path / "l.json"
    cmd = [sys.executable, "benchmarks/throughput.py", "agent=dqn", "env=cartpole", "network.hidden=[16,16]",
           "batch_size=16", "bench.modes=[graph]", "bench.repeats=2", "bench.loop_steps=100", "bench.warmup=200",
           "bench.only=loop", f"bench.output={out}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    graph = json.loads(out.read_text())["results"]["graph"]
    assert set(graph) == {"loop_steps_per_s", "loop_us_per_step"} and graph["loop_steps_per_s"] > 0


def test_compare_sb3_rerun_of_one_case_keeps_the_others(tmp_path):
    """compare_sb3.py --only reruns some cases; the JSON keeps the cases it did not rerun."""
    sys.path.insert(0, ROOT)
    from benchmarks.compare_sb3 import write_report

    path = str(tmp_path / "cmp.json")
    write_report(path, {"a": {"ratio": 1.0}, "b": {"ratio": 2.0}}, argparse.Namespace(rounds=3))
    write_report(path, {"b": {"ratio": 3.0}}, argparse.Namespace(rounds=1))
    cases = json.loads(open(path).read())["cases"]
    assert cases["a"] == {"ratio": 1.0, "settings": {"rounds": 3}}
    assert cases["b"] == {"ratio": 3.0, "settings": {"rounds": 1}}


def test_timed_intervals_start_after_the_tracing_interval():
    """The loop's figures use `intervals` intervals from the end of the one that holds the tracing
    (warmup + steps) on, whether or not the warm-up is a multiple of the interval."""
    sys.path.insert(0, ROOT)
    from benchmarks.throughput import _PartTimer, _Records, interval_rate, timed_intervals

    records = _Records(_PartTimer())
    # an update record every 500 steps; the run: 1000 warm-up steps, then 4 intervals of 500
    records.rows = [(step, {}, step / 100.0, {}) for step in range(500, 3001, 500)]
    intervals = timed_intervals(records, warmup=1000, steps=500, intervals=3)
    assert [(r0[0], r1[0]) for r0, r1 in intervals] == [(1500, 2000), (2000, 2500), (2500, 3000)]
    assert interval_rate(intervals) == 100.0


def _module(path: str, name: str):
    """A script of benchmarks/ as a module (SB3's and the author's scripts run in SB3's venv; their
    config mapping needs only hydra and gymnasium, which the project has)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sb3_learning():
    return _module("benchmarks/sb3_learning.py", "sb3_learning")


def _compose_sb3(*overrides):
    from training.config import compose_config

    return compose_config(overrides, "sb3_learning")


def test_sb3_learning_takes_the_settings_of_the_same_train_py_run():
    agent, kwargs = _sb3_learning().sb3_settings(_compose_sb3("agent=td3", "env=hopper", "batch_size=128",
                                                              "agent.tau=0.01", "network.hidden=[64,32]"))
    assert agent == "td3"
    assert kwargs["policy_kwargs"] == {"net_arch": [64, 32], "activation": "relu"}
    assert (kwargs["batch_size"], kwargs["tau"], kwargs["learning_starts"], kwargs["buffer_size"]) == (128, 0.01, 25000, 1000000)
    assert (kwargs["policy_delay"], kwargs["target_policy_noise"], kwargs["target_noise_clip"]) == (2, 0.2, 0.5)
    assert (kwargs["learning_rate"], kwargs["gamma"], kwargs["train_freq"], kwargs["gradient_steps"]) == (3e-4, 0.99, 1, 1)
    agent, kwargs = _sb3_learning().sb3_settings(_compose_sb3("agent=ddpg", "updates_per_step=0.5", "train_every=4"))
    assert agent == "ddpg" and (kwargs["train_freq"], kwargs["gradient_steps"]) == (4, 2)
    assert "policy_delay" not in kwargs and kwargs["n_steps"] == 1
    _, kwargs = _sb3_learning().sb3_settings(_compose_sb3("agent=dqn", "env=cartpole", "buffer.n_step=3"))
    assert kwargs["n_steps"] == 3


def test_sb3_learning_gives_sb3_contribs_crossq_the_same_settings():
    agent, kwargs = _sb3_learning().sb3_settings(_compose_sb3("agent=crossq", "env=hopper", "network.hidden=[256,256]"))
    assert agent == "crossq" and "tau" not in kwargs
    assert kwargs["policy_kwargs"] == {"net_arch": {"pi": [256, 256], "qf": [256, 256]}, "activation": "relu"}
    assert (kwargs["learning_rate"], kwargs["policy_delay"], kwargs["ent_coef"], kwargs["target_entropy"]) == \
        (1e-3, 3, "auto_1.0", "auto")
    module = _sb3_learning()
    with pytest.raises(module.SettingError, match="beta_1 0.9"):
        module.sb3_settings(_compose_sb3("agent=crossq", "agent.beta_1=0.9"))


def test_sb3_learning_gives_ppo_the_rl_zoos_settings_that_train_py_composes():
    """agent=ppo_sb3 env=hopper: the RL Zoo's tuned Hopper (batch_size 32 of 512 steps, SB3's vf_coef
    half of train.py's, VecNormalize with gamma); CleanRL's PPO (agent=ppo) is refused, naming why."""
    module = _sb3_learning()
    agent, kwargs = module.sb3_settings(_compose_sb3("agent=ppo_sb3", "env=hopper"))
    assert agent == "ppo"
    assert (kwargs["n_envs"], kwargs["n_steps"], kwargs["batch_size"], kwargs["n_epochs"]) == (1, 512, 32, 5)
    assert (kwargs["learning_rate"], kwargs["anneal_lr"], kwargs["gamma"], kwargs["gae_lambda"]) == (9.80828e-05, False, 0.999, 0.99)
    assert (kwargs["vf_coef"], kwargs["ent_coef"], kwargs["clip_range"], kwargs["max_grad_norm"]) == (0.835671, 0.00229519, 0.2, 0.7)
    assert kwargs["policy_kwargs"] == {"net_arch": {"pi": [256, 256], "vf": [256, 256]}, "activation": "relu",
                                       "ortho_init": False, "log_std_init": -2.0}
    assert kwargs["normalize"] == {"norm_obs": True, "norm_reward": True, "clip_obs": 10.0, "clip_reward": 10.0,
                                   "gamma": 0.999}
    with pytest.raises(module.SettingError) as err:
        module.sb3_settings(_compose_sb3("agent=ppo", "env=hopper", "agent.target_kl=0.02"))
    for what in ("bootstrap_truncation=false", "clip_vloss=true", "target_kl=0.02"):
        assert what in str(err.value), what


def test_sb3_learning_refuses_what_sb3_cannot_reproduce_and_names_each():
    module = _sb3_learning()
    with pytest.raises(module.SettingError) as err:
        module.sb3_settings(_compose_sb3("agent=ddpg", "agent.critic_l2=0.01", "agent.critic_lr=1e-3",
                                         "buffer=prioritized", "num_envs=2", "speed.update_precision=bfloat16",
                                         "updates_per_step=0.25"))
    for what in ("critic_lr", "critic_l2", "PrioritizedReplay", "num_envs 2", "bfloat16", "0.25"):
        assert what in str(err.value), what
    with pytest.raises(module.SettingError) as err:
        module.sb3_settings(_compose_sb3("agent=dqn", "env=cartpole", "network=dueling_mlp", "agent.double=true",
                                         "agent.loss=mse", "agent.target_update_every=100"))
    for what in ("agent.double=true", "dueling_mlp", "agent.loss=mse", "target_update_every=100"):
        assert what in str(err.value), what
    with pytest.raises(module.SettingError, match="agent.tau=0.01 with 128 updates per phase"):
        module.sb3_settings(_compose_sb3("agent=dqn", "env=cartpole", "agent.tau=0.01"))
    with pytest.raises(module.SettingError, match=r"agent.log_std=tanh \(SB3 clamps"):
        module.sb3_settings(_compose_sb3("agent=sac", "agent.log_std=tanh"))
    for agent in ("sac", "crossq"):
        with pytest.raises(module.SettingError, match=r"agent.tanh_epsilon=0.0 \(SB3 and sb3-contrib take"):
            module.sb3_settings(_compose_sb3(f"agent={agent}", "agent.tanh_epsilon=0.0"))


def test_sb3_learning_gives_dqn_the_same_target_copies_and_epsilon():
    """The CartPole preset (after rl-baselines3-zoo): 128 updates every 256 steps from step 1024,
    a copy every 128 updates, epsilon 0.9078 at step 768 falling to 0.04 at step 8000."""
    agent, kwargs = _sb3_learning().sb3_settings(_compose_sb3("agent=dqn", "env=cartpole"))
    assert agent == "dqn"
    assert (kwargs["learning_starts"], kwargs["train_freq"], kwargs["gradient_steps"]) == (768, 256, 128)
    assert (kwargs["learning_rate"], kwargs["batch_size"], kwargs["buffer_size"], kwargs["tau"]) == (2.3e-3, 64, 100000, 1.0)
    assert kwargs["target_update_interval"] == 256 and kwargs["max_grad_norm"] == 10.0
    assert kwargs["policy_kwargs"] == {"net_arch": [256, 256], "activation": "relu"}

    def sb3_epsilon(step):  # SB3's LinearSchedule at progress step / total_steps
        progress, k = step / 50000, kwargs
        if progress > k["exploration_fraction"]:
            return k["exploration_final_eps"]
        return k["exploration_initial_eps"] + progress * (k["exploration_final_eps"] - k["exploration_initial_eps"]) / k["exploration_fraction"]

    from agents.losses import linear_schedule
    for step in (768, 1000, 4000, 7999, 8000, 20000):  # tfrl's clock starts at learning_starts
        assert sb3_epsilon(step) == pytest.approx(linear_schedule(0.9078, 0.04, 7232, step - 768)), step
    # one update per env step: a copy every 500 updates is one every 500 env steps; Polyak averaging
    # after every update is SB3's averaging every env step
    _, kwargs = _sb3_learning().sb3_settings(_compose_sb3("agent=dqn", "env=cartpole", "updates_per_step=1",
                                                          "train_every=1", "agent.target_update_every=500"))
    assert kwargs["target_update_interval"] == 500
    _, kwargs = _sb3_learning().sb3_settings(_compose_sb3("agent=dqn", "env=cartpole", "updates_per_step=0.25",
                                                          "train_every=4", "agent.tau=0.01", "agent.max_grad_norm=null"))
    assert (kwargs["target_update_interval"], kwargs["tau"], kwargs["max_grad_norm"]) == (4, 0.01, None)


def test_sb3_learning_loads_no_tensorflow():
    """SB3's venv has no TensorFlow: sb3_learning.py and the evaluation it shares with train.py
    (training/evaluation.py) must import without it."""
    code = ("import importlib.util, sys; "
            f"spec = importlib.util.spec_from_file_location('sb3_learning', {os.path.join(ROOT, 'benchmarks', 'sb3_learning.py')!r}); "
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
            "assert module.evaluate.__module__ == 'training.evaluation'; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_memory_samples_a_run_and_its_resume(tmp_path):
    out = tmp_path / "mem.json"
    cmd = [sys.executable, "benchmarks/memory.py", "total_steps=2500", "learning_starts=1000", "eval_every=500",
           "network.hidden=[32,32]", "batch_size=32", "--resume-steps", "500", "--interval", "0.2",
           "--output", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "| measure | run | resume |" in proc.stdout
    report = json.loads(out.read_text())
    row = report["buffer"]["row_bytes"]
    assert row == (2 * 3 + 1 + 3) * 4  # Pendulum: obs 3, action 1, reward, terminated, truncated; float32
    run, resume = report["results"]["run"], report["results"]["resume"]
    assert (run["end_step"], resume["end_step"]) == (2500, 3000)
    assert run["buffer_mb_at_end"] == round(2500 * row / 2**20, 1)
    for phase in (run, resume):
        assert phase["exit_code"] == 0
        # the exact peak holds TensorFlow (hundreds of MB) and bounds every sampled total
        assert phase["maxrss_mb"] > 200 and phase["maxrss_mb"] >= 0.95 * phase["peak_total_mb"]
        assert 0 < phase["peak_non_buffer_anon_mb"] <= phase["peak_anon_mb"]
        quarters = phase["non_buffer_anon_mb_at_quarters"]
        assert len(quarters) == 4 and all(0 < q <= phase["peak_non_buffer_anon_mb"] for q in quarters)
    steps = [s["step"] for s in report["samples"]["run"] if s["step"] is not None]
    assert steps == sorted(steps) and steps[-1] == 2500


def test_memory_refuses_bad_input_before_running_anything():
    base = [sys.executable, "benchmarks/memory.py"]
    proc = subprocess.run([*base, "--resume-steps", "-5"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "--resume-steps at least 0" in proc.stderr
    proc = subprocess.run([*base, "agent=a3c"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "agent/a3c" in proc.stderr and "ran nothing" in proc.stderr
    proc = subprocess.run([*base, "buffer=prioritized", "--sb3"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "--sb3: buffer" in proc.stderr and "compare with buffer=uniform" in proc.stderr
    proc = subprocess.run([*base, "total_steps=100", "learning_starts=1000"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode != 0 and "learning_starts (1000) must be smaller" in proc.stderr
    assert "nothing was measured" in proc.stderr


def test_memory_reads_values_at_steps_and_the_process_tree():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from memory import process_tree, value_at

    points = [(1000, 5.0), (2000, 6.0), (2000, 7.0), (4000, 9.0)]
    assert value_at(points, [500, 1000, 2500, 3999, 4000, 9000]) == [None, 5.0, 7.0, 7.0, 9.0, 9.0]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = process_tree(os.getpid())
        assert tree[0] == os.getpid() and child.pid in tree
    finally:
        child.kill()
        child.wait()


def test_memory_counts_pages_a_forked_child_shares_once():
    """A child forked from a process holding 200 MB, before it writes or execs, shares every page:
    the tree holds 200 MB, not 400 (plain RSS summed over the tree said 400)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from memory import tree_memory

    script = ("import os, sys, time\n"
              "import numpy as np\n"
              "a = np.ones(200 * 2**20, dtype=np.uint8)\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    time.sleep(60); os._exit(0)\n"
              "print(pid, flush=True); sys.stdin.readline(); os.kill(pid, 9)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        alone = tree_memory(child)["anon_mb"]  # the child's share of the pages
        tree = tree_memory(proc.pid)["anon_mb"]
        assert 195 < tree < 260 and 90 < alone < 140
    finally:
        proc.communicate("\n", timeout=30)


def test_every_run_of_every_study_composes(make_cfg):
    """Each run's whole command line (its threads and checkpoint settings too) composes as its
    script composes it, and SB3's settings can be reproduced by SB3: a script would refuse them at
    launch, hours into a study."""
    from training.config import compose_config
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import studies

    _module("benchmarks/mrq_reference.py", "mrq_reference")  # registers its config
    for study, (_, runs) in studies.STUDIES.items():
        assert len({r.name for r in runs}) == len(runs), study
        for run in runs:
            command = run.command("unused")
            overrides = [o for o in command[2:] if not o.startswith("hydra.")]
            assert command[1] == studies.SCRIPTS[run.implementation][1], run.name
            if run.implementation == "tfrl":
                assert make_cfg(*overrides).total_steps > 0, run.name
                continue
            cfg = compose_config(overrides, {"sb3": "sb3_learning", "author": "mrq_reference"}[run.implementation])
            if run.implementation == "sb3":
                _sb3_learning().sb3_settings(cfg)
            else:
                assert cfg.agent._target_ == "agents.mrq.MRQ" and cfg.mrq_author.threads == 1, run.name


def test_a_study_keeps_its_runs_and_its_aggregate_in_its_lab_folder():
    """labs/<study>/runs/<run>/ holds a study's kept runs, labs/<study>/ its aggregate, the records
    benchmarks/figures.py draws the curves from."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import studies

    for study, (_, runs) in studies.STUDIES.items():
        assert studies.kept_dir(study, runs[0]) == os.path.join(ROOT, "labs", study, "runs", runs[0].name)
    kept = [study for study in studies.STUDIES if os.path.isdir(os.path.join(ROOT, "labs", study, "runs"))]
    assert {"minatar_dqn", "dmc_sac_td7", "atari_dqn", "mrq_dmc"} <= set(kept), kept


def test_a_study_keeps_a_completed_run_whole_and_aggregate_reads_the_kept_copy(tmp_path, capsys, monkeypatch):
    """What `studies.py run` keeps of a run is all aggregate.py needs; a kept run counts only with
    the overrides its study declares; a stopped run is not complete."""
    from helpers import InProcess

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import studies

    from analysis.runs import find_run_dirs, load_run

    overrides = ("agent=dqn", "env=cartpole", "total_steps=300", "learning_starts=100", "eval_every=150",
                 "eval_episodes=1", "network.hidden=[8]")
    run_dir = tmp_path / "run"
    InProcess(capsys).train(run_dir, *overrides)
    assert studies.completed(str(run_dir))
    monkeypatch.setattr(studies, "LEARNING", str(tmp_path / "learning"))
    run = studies.Run("tfrl_dqn_cartpole_s0", "tfrl", overrides)
    kept = tmp_path / "learning" / "study" / "runs" / run.name
    kept.parent.mkdir(parents=True)
    for _ in range(2):  # the second time over the first copy
        studies.keep(str(run_dir), str(kept))
    assert sorted(os.listdir(kept)) == [".hydra", "eval.csv", "summary.json", "train.csv"]
    assert os.listdir(kept.parent) == [run.name]  # no temp dirs left beside it
    record = load_run(str(kept))
    assert record.final_step == 300 and record.steps.tolist() == [0, 150, 300]
    assert find_run_dirs([str(kept.parent)])[0] == [str(kept)]
    assert studies.is_kept("study", run)
    assert not studies.is_kept("study", studies.Run(run.name, "tfrl", (*overrides[:2], "total_steps=600")))
    summary = json.loads((run_dir / "summary.json").read_text())
    (kept / "summary.json").write_text(json.dumps({**summary, "stopped": True}))
    assert not studies.completed(str(kept)) and not studies.is_kept("study", run)


def test_mutations_runs_a_declared_mutation_and_refuses_unknown_names(tmp_path):
    """benchmarks/mutations.py breaks MR.Q's buffer setting on a throwaway worktree (never this
    checkout) and the config test catches it; an unknown name is refused before anything runs."""
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: mutations.py mutates a worktree of HEAD")
    out = tmp_path / "mutations.json"
    cmd = [sys.executable, "benchmarks/mutations.py", "--output", str(out)]
    proc = subprocess.run([*cmd, "--only", "Q28"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result,) = json.loads(out.read_text())["mutations"]
    assert (result["name"], result["result"], result["file"]) == ("Q28", "caught", "conf/buffer/mrq.yaml")
    assert "max_reset_every: 0" in open(os.path.join(ROOT, "conf", "buffer", "mrq.yaml")).read()
    bad = subprocess.run([*cmd, "--only", "NOPE"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown mutation names" in bad.stderr


def test_update_checks_set_keras_layers_from_pytorch_parameters_in_pytorchs_meaning():
    """The update checks' layouts: a Conv2D, Flatten and Dense model set from PyTorch-layout
    parameters computes what PyTorch's Conv2d, flatten (C, H, W) and Linear compute, and reads back
    as the same parameters."""
    import keras

    from benchmarks.update_check import keras_weights, layer_pairs, set_state

    rng = np.random.default_rng(0)
    params = {"net/c.weight": rng.normal(size=(3, 2, 3, 3)), "net/c.bias": rng.normal(size=3),
              "net/d.weight": rng.normal(size=(4, 3 * 3 * 3)), "net/d.bias": rng.normal(size=4)}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    x = rng.normal(size=(2, 5, 5)).astype(np.float32)  # (C, H, W)
    conv = np.array([[[np.sum(params["net/c.weight"][o] * x[:, i:i + 3, j:j + 3]) for j in range(3)]
                      for i in range(3)] for o in range(3)]) + params["net/c.bias"][:, None, None]
    expected = params["net/d.weight"] @ conv.ravel() + params["net/d.bias"]  # PyTorch's flatten: (C, H, W)

    inputs = keras.Input((5, 5, 2))
    h = keras.layers.Flatten(name="m_flat")(keras.layers.Conv2D(3, 3, name="m_conv1")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(4, name="m_out")(h), name="m")
    targets = [(layer_pairs(model, {"conv1": "c", "out": "d"}), "net", None)]
    set_state(params, targets)
    np.testing.assert_allclose(model(x.transpose(1, 2, 0)[None]).numpy()[0], expected, rtol=1e-5, atol=1e-5)
    for key, value in keras_weights(targets).items():
        np.testing.assert_array_equal(value, params[key])


def test_the_mrq_chained_checks_author_conventions_by_hand():
    """author_mrq_chained_check.py's adapters of the two documented departures, on 5 steps whose
    second terminates: the author's rows are 0, 1, its final-observation row, 2, 3, 4. Its 3-step
    sum weighs each reward by its own not-done flag across that row (from step 1: the terminal
    reward dropped, gamma^2 times the next episode's first added), and its reward scale counts that
    row in its size once a later add is in."""
    from benchmarks.author_mrq_chained_check import GAMMA, AuthorConventions, author_rows
    from buffers.uniform import UniformReplay

    stream = {"reward": np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32), "terminated": np.array([0, 1, 0, 0, 0], bool),
              "truncated": np.zeros(5, bool), "next_obs": np.arange(5, dtype=np.float32)[:, None] + 0.5}
    np.testing.assert_array_equal(author_rows(stream["terminated"]), [0, 1, -1, 2, 3, 4])
    buf = UniformReplay(10, 1, 1, GAMMA, np.random.default_rng(0), n_step=3)
    conventions = AuthorConventions(buf, stream)
    for t in range(5):
        buf.add([[t]], [[0.0]], stream["reward"][t:t + 1], [[t + 0.5]], stream["terminated"][t:t + 1], [False])
        if t == 2:  # three adds, one episode ended before the newest
            assert conventions.mean_abs_reward() == pytest.approx((1 + 2 + 3) / (3 + 1))
    # from step 3 the rows after the newest are not written yet: reward 0, not-done 0, as the author's zeros
    reward, next_obs, discount = conventions.n_step_return(np.array([0, 1, 2, 3]))
    np.testing.assert_allclose(reward, [1.0, GAMMA ** 2 * 3.0, 3.0 + GAMMA * 4.0 + GAMMA ** 2 * 5.0, 4.0 + GAMMA * 5.0],
                               rtol=1e-6)
    np.testing.assert_allclose(discount, [0.0, 0.0, GAMMA ** 3, 0.0], rtol=1e-6)
    assert next_obs[2, 0] == 4.5
    # DR.Q's runs past the termination, as the author's rows hold them: the final-observation row
    # (its final state 1.5, a zero action, reward 0, terminated, row 0's state as the next), then row 2
    stream = {**stream, "obs": np.arange(5, dtype=np.float32)[:, None], "action": np.arange(5, dtype=np.float32)[:, None] + 10}
    runs = AuthorConventions(buf, stream).runs(np.array([0, 1]), 3)
    np.testing.assert_array_equal(runs.obs[:, 0], [0.0, 1.0])
    np.testing.assert_array_equal(runs.action[..., 0], [[10, 11, 0], [11, 0, 12]])
    np.testing.assert_array_equal(runs.reward, [[1, 2, 0], [2, 0, 3]])
    np.testing.assert_array_equal(runs.terminated, [[0, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(runs.next_obs[..., 0], [[1.0, 1.5, 0.0], [1.5, 2.0, 2.5]])


def test_published_reads_an_authors_task_and_sets_runs_beside_its_seeds(tmp_path):
    """benchmarks/published.py: the rows of one `Env:` block of the author's layout, a run's eval.csv
    at the same steps, and the seeds' mean, range and a bootstrap band that holds the mean."""
    published = _module("benchmarks/published.py", "published")
    results = tmp_path / "dmc_results.txt"
    results.write_text("--------------------\nEnv: Dmc-a\nTimestep\tSeed 0\t\tSeed 1\n0\t\t1.0\t\t3.0\n"
                       "--------------------\nEnv: Dmc-b\nTimestep\tSeed 0\t\tSeed 1\t\tSeed 2\n"
                       "0\t\t10.0\t\t20.0\t\t60.0\n5000\t\t100.0\t\t200.0\t\t300.0\n")
    table = published.read_published(str(results), "Dmc-b")
    assert sorted(table) == [0, 5000] and table[5000].tolist() == [100.0, 200.0, 300.0]
    mean, low, high = published.mean_band(table[0])
    assert mean == 30.0 and 10.0 <= low < mean < high <= 60.0
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.csv").write_text("step,return_mean\n0,12.5\n5000,250.0\n")
    text = published.table(table, {"run": published.read_run(str(run))}, 5000)
    assert "| 0 | 12.5 | 30.0 [" in text and "| 10.0-60.0 |" in text
    assert "| 5000 | 250.0 | 200.0 [" in text and "| 100.0-300.0 |" in text
    with pytest.raises(SystemExit, match="no task 'Dmc-c'"):
        published.read_published(str(results), "Dmc-c")


def test_published_reads_dr_qs_csv_with_its_frames_as_agent_steps(tmp_path):
    """DR.Q's results/drq.csv layout: rows by env_name, seed and env_step; DMC's env_step counts frames."""
    published = _module("benchmarks/published.py", "published")
    results = tmp_path / "drq.csv"
    results.write_text(",exp_name,env_name,seed,metric,env_step,value\n0,drq,cheetah_run,1,avg_return,0,5.0\n"
                       "1,drq,cheetah_run,0,avg_return,0,3.0\n2,drq,cheetah_run,0,avg_return,50000,300.0\n"
                       "3,drq,cheetah_run,1,avg_return,50000,500.0\n4,drq,walker_walk,0,avg_return,0,9.0\n")
    table = published.read_published_csv(str(results), "cheetah_run", frames_per_step=2)
    assert sorted(table) == [0, 25000] and table[0].tolist() == [3.0, 5.0] and table[25000].tolist() == [300.0, 500.0]
    with pytest.raises(SystemExit, match="its tasks: cheetah_run, walker_walk"):
        published.read_published_csv(str(results), "hopper")
