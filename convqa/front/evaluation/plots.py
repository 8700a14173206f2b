"""PNG plots of the evaluation tables (matplotlib, Agg backend: no display needed).

- `hits_curve`: Hits@k against k, one line per system (the retrieval table's columns at a glance);
- `type_bars`: one metric per question type (first / no-switch / switch, and all), a bar per
  system: where the topic-switch turns fall behind;
- `answer_curve`: EM and F1 against the number of passages read, one line per system (a
  phrase-index row, which reads no passages, as a dashed level);
- `training_curve`: a training run's held-out F1 per source (and their mean) against optimizer
  steps, next to its training loss (convqa/front/tools/plot_reader_curve.py).

Each takes the result dicts of `convqa.front.evaluation` (as in the tables' JSON) and writes one PNG
atomically. matplotlib is imported on first use, so importing this module is cheap.
"""
from __future__ import annotations

import math
import os
from typing import Any, Sequence

from convqa.io import atomic_write

TYPES = ("first", "no-switch", "switch", "all")
_WIDTH, _PLOT, _ROW, _PAD = 8.0, 3.6, 0.19, 0.35  # inches: width, plot, legend row, legend pad


def _top(values: Sequence[float]) -> float:
    """A y-axis limit (percent) a little above the largest value, in steps of 10."""
    return float(min(100, max(10, 10 * math.ceil(1.1 * max(values, default=0) / 10))))


def _style(index: int) -> str:
    """Solid for the first 10 systems (matplotlib's 10 colours), then dashed, then dotted."""
    return ("-", "--", ":")[index // 10 % 3]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> None:
    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110, bbox_inches="tight")


def _figure(plt, systems: int, ncols: int = 1):
    height = _PLOT + _ROW * systems + _PAD
    return plt.subplots(1, ncols, figsize=(_WIDTH, height), squeeze=False)


def _legend(fig, axes) -> None:
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=1, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, (_ROW * len(labels) + _PAD) / height, 1, 1))


def hits_curve(results: Sequence[dict[str, Any]], level: str, path: str | os.PathLike,
               title: str) -> None:
    """Hits@k (percent, all turns) against k (log scale) for each system at `level`."""
    plt = _pyplot()
    fig, axes = _figure(plt, len(results))
    ax = axes[0][0]
    for index, result in enumerate(results):
        ks = result["ks"]
        overall = result["levels"][level]["groups"].get("all", {})
        if overall.get("count"):
            ax.plot(ks, [100 * overall[f"hits@{k}"] for k in ks], marker="o",
                    linestyle=_style(index), label=result["label"])
    ax.set_xscale("log")
    ks = results[0]["ks"] if results else []
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (passages retrieved)")
    ax.set_ylabel("Hits@k (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=10)
    _legend(fig, axes)
    _save(fig, path)
    plt.close(fig)


def type_bars(results: Sequence[dict[str, Any]], path: str | os.PathLike, title: str,
              metric: str, ylabel: str, groups_of, scale: float = 1.0,
              types: Sequence[str] = TYPES) -> None:
    """Grouped bars: x = question type (`types`), one bar per system, height = `metric` *
    `scale`. `groups_of(result)` gives the result's {type: {metric, count}}."""
    plt = _pyplot()
    fig, axes = _figure(plt, len(results))
    ax = axes[0][0]
    width = 0.8 / max(len(results), 1)
    highest: list[float] = []
    for index, result in enumerate(results):
        groups = groups_of(result)
        heights = [scale * groups[t][metric] if groups.get(t, {}).get("count") else 0.0
                   for t in types]
        positions = [x - 0.4 + width * (index + 0.5) for x in range(len(types))]
        ax.bar(positions, heights, width=width, label=result["label"])
        highest.extend(heights)
    counts = groups_of(results[0]) if results else {}
    ax.set_xticks(range(len(types)),
                  [f"{t}\n(n={int(counts.get(t, {}).get('count', 0))})" for t in types])
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, _top(highest))
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title, fontsize=10)
    _legend(fig, axes)
    _save(fig, path)
    plt.close(fig)


def answer_curve(results: Sequence[dict[str, Any]], top_ks: Sequence[int],
                 path: str | os.PathLike, title: str) -> None:
    """EM and F1 (all turns) against the number of passages read, one line per system."""
    from .phrase import scores_at  # a phrase-index row: one answer, a flat line

    plt = _pyplot()
    fig, axes = _figure(plt, len(results), ncols=2)
    top = _top([scores_at(result, k)["groups"]["all"][metric] for result in results
                for k in top_ks for metric in ("em", "f1")])
    for ax, metric in zip(axes[0], ("em", "f1")):
        for index, result in enumerate(results):
            values = [scores_at(result, k)["groups"]["all"][metric] for k in top_ks]
            if result.get("phrase_index") is not None:  # a level, not a curve: no markers
                ax.plot(list(top_ks), values, linestyle="--", label=f"{result['label']} "
                        "(phrase index: one answer, no passages read)")
                continue
            ax.plot(list(top_ks), values, marker="o", linestyle=_style(index),
                    label=result["label"])
        ax.set_xscale("log")
        ax.set_xticks(list(top_ks), [str(k) for k in top_ks])
        ax.set_xlabel("passages read")
        ax.set_ylabel(f"{metric.upper()} (%)")
        ax.set_ylim(0, top)
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    _legend(fig, axes)
    _save(fig, path)
    plt.close(fig)


def training_curve(log: Sequence[dict[str, Any]], path: str | os.PathLike, title: str,
                   smooth: int = 50, loss_steps: int | None = None) -> None:
    """From a run's log.jsonl records: held-out F1 per source and the macro mean (lines with
    a "heldout" entry) against the step, and the training loss (a moving mean over `smooth`
    loss records) against the step. `loss_steps`: the steps that mean spans, when loss
    records are themselves means of several steps (default `smooth`)."""
    plt = _pyplot()
    points = [r for r in log if isinstance(r.get("heldout"), dict)]
    losses = [(r["step"], r["loss"]) for r in log if "loss" in r and "heldout" not in r]
    sources = sorted({s for r in points for s in r["heldout"].get("sources", {})})
    fig, axes = _figure(plt, len(sources) + 1, ncols=2)
    ax = axes[0][0]
    steps = [r["step"] for r in points]
    ax.plot(steps, [r["heldout"]["f1"] for r in points], color="black", linewidth=2.2,
            marker="o", markersize=3, label="mean over sources (F1)")
    for index, source in enumerate(sources):
        kept = [r for r in points if source in r["heldout"]["sources"]]
        ax.plot([r["step"] for r in kept], [r["heldout"]["sources"][source]["f1"] for r in kept],
                linestyle=_style(index), marker=".", label=f"{source} (F1, n="
                f"{kept[-1]['heldout']['sources'][source]['count']})" if kept else source)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("held-out F1, gold passage (%)")
    ax.set_ylim(0, _top([r["heldout"]["f1"] for r in points] + [
        v["f1"] for r in points for v in r["heldout"]["sources"].values()]))
    ax.grid(True, alpha=0.3)
    ax = axes[0][1]
    if losses:
        window = max(1, min(smooth, len(losses)))
        values = [v for _, v in losses]
        means = [sum(values[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1))
                 for i in range(len(values))]
        ax.plot([s for s, _ in losses], means, color="tab:gray")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"training loss (mean of {loss_steps or smooth} steps)")
    ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    _legend(fig, axes)
    _save(fig, path)
    plt.close(fig)
