"""Write docs/configuration.md from conf/: every config group, its options and every key with its
default and the comment beside it in the yaml. The reference is generated, so it cannot drift from
the configs (tests/test_docs.py regenerates it and compares):

    uv run python docs/reference.py
"""
from __future__ import annotations

import argparse
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF = os.path.join(ROOT, "conf")
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.]*):(?P<value>[^#]*?)\s*(?:#\s?(?P<comment>.*))?$")

# the groups a run composes, in the order a reader meets them, and what each is for
GROUPS = {
    "agent": "the algorithm and its hyper-parameters (`agent=td3`, `agent.tau=0.01`)",
    "network": "the networks' builder and sizes (`network=simba`, `network.hidden=[400,300]`)",
    "buffer": "the replay buffer (`buffer=prioritized`, `buffer.n_step=3`)",
    "env": "the task and its reference run length (`env=ant`, `env.id=<any gymnasium id>`)",
    "speed": "how the update runs, never what it computes (`speed=plain`, `speed.compile=xla`)",
    "tuned": "applied by itself for one agent on one env (`<agent>_<env>.yaml`)",
    "agent_network": "applied by itself for one agent with one network (`<agent>_<network>.yaml`)",
}
ENTRYPOINTS = {
    "config.yaml": "train.py: the top-level keys of a run",
    "evaluate.yaml": "evaluate.py",
    "throughput.yaml": "benchmarks/throughput.py: a run's config plus `bench`",
    "sb3_learning.yaml": "benchmarks/sb3_learning.py: a run's config plus `sb3`",
}


def header(lines: list[str]) -> str:
    """The comment lines a yaml file opens with, as a paragraph (`# @package` lines left out), the
    commands among them as a code block after it."""
    text, commands = [], []
    for line in lines:
        if not line.startswith("#"):
            break
        line = line.lstrip("#").strip()
        if line.startswith(("python ", "uv run ")):
            commands.append(f"    {line}")
        elif line and not line.startswith("@package"):
            text.append(line)
    return "\n\n".join(part for part in (" ".join(text), "\n".join(commands)) if part)


def keys(lines: list[str]) -> list[tuple[str, str, str]]:
    """(dotted key, default, comment) of every key of a yaml file of this project's style: one key
    per line, nesting by indentation, a comment beside the key. Lists under a key (`- item`) are
    folded into its default; the defaults list and hydra's own section are left out."""
    found: list[list[str]] = []
    path: list[tuple[int, str]] = []
    skip_indent = None
    comment_column = None  # where the last key's comment began: a comment line there continues it
    for line in lines:
        if line.lstrip().startswith("#") and found and comment_column is not None \
                and len(line) - len(line.lstrip()) == comment_column:
            found[-1][2] += " " + line.strip()[1:].strip()
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            comment_column = None
            continue
        m = KEY.match(line.rstrip())
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if indent > skip_indent:
                continue
            skip_indent = None
        if m is None:
            if line.lstrip().startswith("- ") and found and indent > 0:  # a list item of the last key
                item = line.strip()[2:].split("#")[0].strip()
                last = found[-1]
                last[1] = (last[1] + ", " if last[1] else "") + item
            continue
        key, value, comment = m["key"], m["value"].strip(), (m["comment"] or "").strip()
        comment_column = line.index("#") if m["comment"] is not None else None
        while path and path[-1][0] >= indent:
            path.pop()
        if key in ("defaults", "hydra") and not path:
            skip_indent = indent
            continue
        dotted = ".".join([p for _, p in path] + [key])
        path.append((indent, key))
        if value or comment or key.startswith("_"):
            found.append([dotted, value, comment])
        else:
            found.append([dotted, "", ""])  # a section: its keys follow
    return [(k, v, c) for k, v, c in found if not (v == "" and c == "" and any(o[0].startswith(k + ".") for o in found))]


def table(rows: list[tuple[str, str, str]], prefix: str = "") -> list[str]:
    out = ["| key | default | what it does |", "|---|---|---|"]
    for key, value, comment in rows:
        if key.startswith("_") and key not in ("_target_",):
            continue
        value = value.replace("|", "\\|") or " "
        out.append(f"| `{prefix}{key}` | `{value}` | {comment.replace('|', '/')} |")
    return out


def read(path: str) -> list[str]:
    with open(path) as f:
        return f.read().splitlines()


def reference() -> str:
    out = ["# Configuration reference", "",
           "Generated from `conf/` by `uv run python docs/reference.py`; do not edit by hand. Hydra composes a run",
           "from the groups below (`python train.py agent=sac env=hopper network=simba`); any key can be set on",
           "the command line (`agent.tau=0.01`), and `python train.py --cfg job` prints the composed config.", ""]
    for name, what in ENTRYPOINTS.items():
        lines = read(os.path.join(CONF, name))
        out += [f"## `{name}`: {what}", ""]
        if header(lines):
            out += [header(lines), ""]
        out += table(keys(lines)) + [""]
    on_disk = sorted(d for d in os.listdir(CONF) if os.path.isdir(os.path.join(CONF, d)) and d != "hydra")
    unknown = [d for d in on_disk if d not in GROUPS]
    if unknown:
        raise SystemExit(f"docs/reference.py: conf/{unknown[0]}/ is a config group it does not describe; add it to GROUPS")
    for group, what in GROUPS.items():
        options = sorted(f[:-5] for f in os.listdir(os.path.join(CONF, group)) if f.endswith(".yaml"))
        out += [f"## Group `{group}`: {what}", "", "Options: " + ", ".join(f"`{o}`" for o in options) + ".", ""]
        for option in options:
            lines = read(os.path.join(CONF, group, f"{option}.yaml"))
            global_package = any(line.startswith("# @package _global_") for line in lines)
            out += [f"### `{group}={option}`" if group not in ("tuned", "agent_network") else f"### `{group}/{option}.yaml`", ""]
            if header(lines):
                out += [header(lines), ""]
            out += table(keys(lines), "" if global_package else f"{group}.") + [""]
    out += ["## Launchers and sweepers", "",
            "`conf/hydra/launcher/` and `conf/hydra/sweeper/` hold presets for Hydra's plugins: "
            + ", ".join(f"`hydra/{kind}={f[:-5]}`" for kind in ("launcher", "sweeper")
                        for f in sorted(os.listdir(os.path.join(CONF, "hydra", kind))) if f.endswith(".yaml")) + ".", ""]
    return "\n".join(out)


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "configuration.md"))
    args = p.parse_args(argv)
    with open(args.out, "w") as f:
        f.write(reference())
    print(f"wrote {os.path.relpath(args.out, ROOT)}")
    return args.out


if __name__ == "__main__":
    main()
