"""The registry of agents (tests/registry.py) is whole: one entry per conf/agent yaml, each building the
class that yaml configures, on the action space its class declares."""
import os

import numpy as np
import pytest

from helpers import ROOT
from registry import AGENTS


def test_every_agent_config_has_one_entry():
    configs = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "conf", "agent")) if f.endswith(".yaml"))
    assert sorted(AGENTS) == configs, "add the agent to tests/registry.py's AGENTS (one entry drives every cross-agent test)"


@pytest.mark.parametrize("name", list(AGENTS))
def test_an_entry_builds_the_class_its_config_names(make_cfg, name):
    from training.builder import agent_class

    cls = agent_class(make_cfg(f"agent={name}"))
    agent = AGENTS[name].build(np.random.default_rng(0))
    assert type(agent) is cls
    assert cls.ACTION_KIND in ("any", "discrete" if AGENTS[name].discrete else "continuous")
    assert AGENTS[name].golden, "every agent has a golden run"
