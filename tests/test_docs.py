"""The docs cannot drift: docs/configuration.md is what docs/reference.py writes from conf/, it names
every key of the composed config, and every `python train.py` command quoted in README.md and
docs/ composes with Hydra."""
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_configuration_reference_is_generated_from_conf(tmp_path):
    out = tmp_path / "configuration.md"
    proc = subprocess.run([sys.executable, "docs/reference.py", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        assert f.read() == out.read_text(), "docs/configuration.md is stale: run `uv run python docs/reference.py`"


@pytest.mark.parametrize("overrides", [[], ["agent=sac", "network=simba", "buffer=prioritized"], ["agent=dqn"],
                                       ["agent=ga", "env=cartpole"], ["agent=ddpg", "network=dueling_mlp"]])
def test_every_key_of_a_composed_config_is_in_the_reference(make_cfg, overrides):
    text = open(os.path.join(ROOT, "docs", "configuration.md")).read()
    cfg = OmegaConf.to_container(make_cfg(*overrides))

    def dotted(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict) and value and not key.startswith("_"):
                yield from dotted(value, f"{prefix}{key}.")
            elif not key.startswith("_"):
                yield f"{prefix}{key}"

    missing = [k for k in dotted(cfg) if f"`{k}`" not in text]
    assert not missing, f"not in docs/configuration.md: {missing}"


def quoted_commands() -> list[tuple[str, list[str]]]:
    """(where, overrides) of every `python train.py ...` line quoted in README.md and docs/*.md that
    runs one job from the config (not multirun, not resume, no placeholders)."""
    found = []
    for path in [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "*.md"))]:
        for n, line in enumerate(open(path), 1):
            m = re.search(r"python train\.py(?P<args>[^`#\n]*)", line)
            if not m:
                continue
            args = shlex.split(m["args"])
            if any(a in ("-m", "--multirun") or a.startswith(("resume=", "-")) or "<" in a or "..." in a for a in args):
                continue
            found.append((f"{os.path.basename(path)}:{n}", args))
    return found


@pytest.mark.parametrize("where,overrides", quoted_commands(), ids=lambda x: x if isinstance(x, str) else None)
def test_every_quoted_command_composes(make_cfg, where, overrides):
    from training.config import validate

    cfg = make_cfg(*overrides)
    OmegaConf.resolve(cfg)
    validate(cfg)
