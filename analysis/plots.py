"""The PNGs: learning curves per env and the performance profile. matplotlib is imported when a
plot is drawn (Agg: files only, no display)."""
from __future__ import annotations

import numpy as np

from analysis.curves import Curve
from analysis.stats import CONFIDENCE


def _color(i: int):
    import matplotlib

    return matplotlib.colormaps["tab10"](i % 10)


def plot_curves(path: str, env: str, env_id: str | None, curves: list[tuple[str, int, Curve]]) -> None:
    """All groups of one env on one axes: IQM eval return vs env steps, 95% CI bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    dashed = False
    for label, color, c in curves:
        marker = "o" if len(c.steps) < 3 else None
        ax.plot(c.steps, c.point, color=_color(color), marker=marker, label=f"{label} (n={c.n_runs})")
        ax.fill_between(c.steps, c.low, c.high, color=_color(color), alpha=0.2, linewidth=0)
        if len(c.more_steps):
            dashed = True
            ax.plot(np.r_[c.steps[-1], c.more_steps], np.r_[c.point[-1], c.more_point], color=_color(color), linestyle="--")
            ax.fill_between(np.r_[c.steps[-1], c.more_steps], np.r_[c.low[-1], c.more_low], np.r_[c.high[-1], c.more_high],
                            color=_color(color), alpha=0.1, linewidth=0)
    if dashed:
        ax.plot([], [], color="gray", linestyle="--", label="fewer runs (some ended early)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval return (IQM over runs)")
    ax.set_title(f"{env}" + (f" ({env_id})" if env_id and env_id != env else "") + f": IQM, {CONFIDENCE:.0%} bootstrap CI")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_profile(path: str, taus: np.ndarray, profiles: list[tuple[str, int, np.ndarray, np.ndarray, np.ndarray]],
                 n_envs: int, what: str = "final return") -> None:
    """rliable's performance profile: fraction of runs with normalized score > tau, 95% CI bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for label, color, point, low, high in profiles:
        ax.plot(taus, point, color=_color(color), label=label)
        ax.fill_between(taus, low, high, color=_color(color), alpha=0.2, linewidth=0)
    ax.set_xlabel(f"normalized {what} $\\tau$ (min-max per env over all runs here; no reference scores)")
    ax.set_ylabel(r"fraction of runs with score > $\tau$")
    ax.set_title(f"Performance profile over {n_envs} env(s), {CONFIDENCE:.0%} stratified bootstrap CI")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if profiles:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no env whose runs differ in score: nothing to normalize", ha="center", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

