"""The docs cannot drift: docs/configuration.md is what docs/reference.py writes from conf/, it names
every key of the composed config, and every command quoted in README.md, docs/ and benchmarks/README.md composes with
Hydra (train.py's also passes its checks) or names only options the script's --help lists."""
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest
from omegaconf import OmegaConf, open_dict

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


SCRIPT = re.compile(r"(?<![\w/.-])python (?P<script>[\w/]+\.py)(?P<args>[^`#\n]*)")


def quoted_commands() -> list[tuple[str, str, str]]:
    """(where, script, arguments) of every `python <script>.py ...` quoted in README.md, docs/*.md
    and benchmarks/README.md, run by the project's interpreter (not `.venv-sb3/bin/python ...`)."""
    found = []
    for path in [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))),
                 os.path.join(ROOT, "benchmarks", "README.md")]:
        for n, line in enumerate(open(path), 1):
            for m in SCRIPT.finditer(line):
                where = f"{os.path.relpath(path, ROOT)}:{n}"
                found.append((where, m["script"], m["args"].replace("\\", " ")))  # a continued line: its first part
    return found


def hydra_config_name(script: str) -> str | None:
    """The config a Hydra script composes, or None for an argparse script."""
    m = re.search(r'config_name="(\w+)"', open(os.path.join(ROOT, script)).read())
    return m and m[1]


def single_job(args: str) -> list[str]:
    """The overrides of one job of a quoted command: each sweep (`seed=0,1,2`, `seed='range(10)'`)
    at its first value; an Optuna search space (`interval(...)`) is left to the sweeper; Hydra's
    flags (`-m`, `--cfg job`) dropped; an optional `[key=a|b|<c>]` of a usage line at its first
    choice; placeholders (`run_dir=outputs/<date>/<time>`, `run_dir=...`) made a path."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = re.sub(r"(?<!\S)(--cfg \w+|--?[\w-]+)", "", args)
    args = re.sub(r"\[([\w.]+=[^|\]]*)[^\]]*\]", r"\1", args)
    plain = [re.sub(r"<[^>]*>|\.\.\.", "x", o) for o in shlex.split(args)]
    out = []
    for o in OverridesParser.create().parse_overrides(plain):
        if o.is_sweep_override():
            if "interval" in o.input_line:
                continue
            value = next(iter(o.sweep_string_iterator()))
            out.append(f"{o.get_key_element()}={value}")
        else:
            out.append(o.input_line)
    return out


COMMANDS = quoted_commands()


def test_one_job_of_a_quoted_command():
    assert single_job(" -m agent=td3,ddpg seed='range(10)' agent.lr=1e-4 'agent.tau=tag(log, interval(1e-3, 1e-1))'") == [
        "agent=td3", "seed=0", "agent.lr=1e-4"]
    assert single_job(" run_dir=outputs/<date>/<time> [checkpoint=latest|best|<step>] --cfg job") == [
        "run_dir=outputs/x/x", "checkpoint=latest"]


def test_a_misspelled_quoted_command_would_fail():
    with pytest.raises(Exception, match="agent.learning_rate"):
        test_every_quoted_command_composes_or_parses("here", "train.py", " agent=td3 agent.learning_rate=1e-3")
    with pytest.raises(AssertionError, match="--bogus"):
        test_every_quoted_command_composes_or_parses("here", "aggregate.py", " multirun/x --bogus 3")


def test_the_docs_quote_commands():
    scripts = {script for _, script, _ in COMMANDS}
    assert {"train.py", "evaluate.py", "aggregate.py"} <= scripts, scripts


@pytest.mark.parametrize("where,script,args", COMMANDS, ids=[f"{w}" for w, _, _ in COMMANDS])
def test_every_quoted_command_composes_or_parses(where, script, args):
    """A Hydra entrypoint's command composes (train.py's also passes train.py's checks); an argparse
    script's command names only options its --help lists."""
    from training.config import compose_config

    assert os.path.exists(os.path.join(ROOT, script)), f"{where}: no such script {script}"
    config_name = hydra_config_name(script)
    if config_name is None:
        helped = script_help(script)
        unknown = [flag for flag in re.findall(r"(?<![\w-])--[\w-]+", args) if flag not in helped]
        assert not unknown, f"{where}: {script} has no options {unknown}"
        return
    overrides = single_job(args)
    from training.plugins import missing_plugin

    missing = missing_plugin(overrides)  # a launcher of an opt-in extra (Ray): skipped as test_ray.py is
    if missing is not None:
        pytest.skip(f"{where}: {missing}")
    resumed = any(o.startswith("resume=") for o in overrides)
    cfg = compose_config([o for o in overrides if not o.startswith("resume=")], config_name, return_hydra_config=True)
    if script == "train.py" and not resumed:
        from training.config import validate

        with open_dict(cfg):
            del cfg["hydra"]
        OmegaConf.resolve(cfg)
        validate(cfg)


_HELP: dict[str, str] = {}


def script_help(script: str) -> str:
    if script not in _HELP:
        proc = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"`python {script} --help` failed: {proc.stderr[-2000:]}"
        _HELP[script] = proc.stdout
    return _HELP[script]


def test_the_code_the_docs_quote_is_in_the_repository():
    """Each line of a ```python or ```yaml block in docs/*.md is a line of some file of agents/,
    conf/, networks/, training/ or tests/ (stripped): the walk-through quotes the code as it is."""
    sources = set()
    for folder in ("agents", "conf", "networks", "training", "tests"):
        for path in glob.glob(os.path.join(ROOT, folder, "**", "*.*"), recursive=True):
            if path.endswith((".py", ".yaml")):
                sources.update(line.strip() for line in open(path))
    stale = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", open(path).read(), flags=re.S)
        for block in blocks:
            stale += [f"{os.path.basename(path)}: {line.strip()}" for line in block.splitlines()
                      if line.strip() and not line.strip().startswith("# ...") and line.strip() not in sources]
    assert not stale, "quoted code not found in the repository:\n" + "\n".join(stale)


def heading_anchors(path: str) -> set[str]:
    """The anchors GitHub gives a markdown file's headings: lower case, punctuation but `-` and `_`
    dropped, spaces as `-`, a repeated heading numbered `-1`, `-2`, ...; headings in ``` blocks are text."""
    seen: dict[str, int] = {}
    fenced = False
    for line in open(path):
        fenced ^= line.startswith("```")
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def test_heading_anchors_are_githubs():
    assert list(heading_anchors(os.path.join(ROOT, "labs", "log.md")))[:3] == [
        "benchmarks", "throughputpy-every-part-of-a-step-and-the-whole-loop", "compare_sb3py-side-by-side-with-stable-baselines3"]


def test_every_local_link_of_the_docs_resolves():
    """README.md's, docs/'s, benchmarks/README.md's and labs/'s links to files of the repository,
    and to headings of its markdown files."""
    broken = []
    for path in [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))),
                 os.path.join(ROOT, "benchmarks", "README.md"),
                 *sorted(glob.glob(os.path.join(ROOT, "labs", "**", "*.md"), recursive=True))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", open(path).read()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            dest = os.path.join(os.path.dirname(path), target) if target else path
            if not os.path.exists(dest):
                broken.append(f"{os.path.relpath(path, ROOT)}: {target}")
            elif anchor and dest.endswith(".md") and anchor not in set(heading_anchors(dest)):
                broken.append(f"{os.path.relpath(path, ROOT)}: {target}#{anchor}")
    assert not broken, broken
