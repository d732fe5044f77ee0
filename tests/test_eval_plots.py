"""The report's plots: per-problem accuracy in one panel per model (no overlaid outlines, no legend over the
bars), each trained model against the base per problem, pass@k with the legend outside the axes."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from eval.plots import BIN_LABELS, accuracy_bins
from eval.records import SAMPLES_FILE
from eval.report import HIST_PLOT, PASS_PLOT, SCATTER_PLOT, write_report
from eval.runner import EvalSettings, compare_to_base, compute_metrics


def test_accuracy_bins_by_hand():
    acc = dict(enumerate([0.0, 0.05, 0.1, 0.15, 0.5, 0.95, 0.999, 1.0, 1.0]))
    counts = accuracy_bins(acc)
    assert len(counts) == len(BIN_LABELS) == 12
    assert counts.tolist() == [1, 2, 1, 0, 0, 1, 0, 0, 0, 0, 2, 2]


def _write_eval(out: Path, accuracies: dict[str, list[int]], n: int) -> dict:
    """An evaluation directory with the given per-problem correct counts c (no model needed)."""
    results = {}
    for name, cs in accuracies.items():
        (out / name).mkdir(parents=True)
        recs = [
            {"index": i, "n": n, "c": c, "correct": [True] * c + [False] * (n - c), "answers": ["1"] * n,
             "scores": [1.0] * c + [0.0] * (n - c), "distinct_correct_answers": float(c > 0),
             "distinct_correct_completions": float(c > 0), "answer_entropy": 0.0, "correct_answer_entropy": 0.0}
            for i, c in enumerate(cs)
        ]  # fmt: skip
        (out / name / SAMPLES_FILE).write_text("".join(json.dumps(r) + "\n" for r in recs))
        s = EvalSettings(model="tiny", adapter=None, task="pairsum", n=n, reward="pair_sum", bootstrap=20)
        config = {"name": name, "model_given": name, **asdict(s)}
        results[name] = {"config": config, "metrics": compute_metrics(recs, s)}
    base = [json.loads(x) for x in (out / "base" / SAMPLES_FILE).read_text().splitlines()]
    for name in accuracies:
        if name != "base":
            recs = [json.loads(x) for x in (out / name / SAMPLES_FILE).read_text().splitlines()]
            results[name]["metrics"]["vs_base"] = compare_to_base(base, recs, "base")
    return results


@pytest.fixture
def figures(monkeypatch):
    """Every figure saved, by file name."""
    from matplotlib.figure import Figure

    saved: dict[str, Figure] = {}
    real = Figure.savefig

    def keep(self, path, *a, **k):
        saved[Path(path).name] = self
        return real(self, path, *a, **k)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_six_models_get_one_panel_each(tmp_path, figures):
    rng = np.random.default_rng(0)
    names = ["base", "grpo", "forward_kl", "dph_js", "dph_fkl", "alpha_dpg"]
    cs = {name: rng.integers(0, 17, size=30).tolist() for name in names}
    cs["grpo"][:5] = [0] * 5
    cs["base"][:5] = [3] * 5  # five problems the base solves and grpo lost
    write_report(tmp_path, _write_eval(tmp_path, cs, 16), "base")
    report = (tmp_path / "report.md").read_text()
    for png in (PASS_PLOT, HIST_PLOT, SCATTER_PLOT):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG" and f"]({png})" in report

    panels = [ax for ax in figures[HIST_PLOT].axes if ax.get_visible()]
    assert len(panels) == 6 and all(ax.get_legend() is None for ax in panels)
    assert [ax.get_title().split(":")[0] for ax in panels] == names
    solved = [int(ax.get_title().split("solved ")[1].split("/")[0]) for ax in panels]
    assert solved == [sum(c > 0 for c in cs[n]) for n in names]

    scatter = [ax for ax in figures[SCATTER_PLOT].axes if ax.get_visible()]
    assert [ax.get_title().split(":")[0] for ax in scatter] == names[1:]
    lost = sum(1 for b, m in zip(cs["base"], cs["grpo"]) if b > 0 and m == 0)
    assert f"lost {lost} (red)" in scatter[0].get_title()

    (ax,) = figures[PASS_PLOT].axes
    legend = ax.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1  # outside the axes


def test_one_model_has_no_scatter(tmp_path, figures):
    write_report(tmp_path, _write_eval(tmp_path, {"base": [0, 4, 8, 16]}, 16), "base")
    assert not (tmp_path / SCATTER_PLOT).exists() and SCATTER_PLOT not in (tmp_path / "report.md").read_text()
    assert len(figures[HIST_PLOT].axes) == 1


def test_the_scatter_says_marker_areas_only_when_they_differ(tmp_path, figures):
    """One problem per point: every marker has one area, and the title does not describe areas; two problems at one
    point: it gives the range."""
    write_report(tmp_path / "one", _write_eval(tmp_path / "one", {"base": [0, 4, 8], "rl": [1, 5, 9]}, 16), "base")
    assert "marker area" not in figures[SCATTER_PLOT].texts[0].get_text()
    two = tmp_path / "two"
    write_report(two, _write_eval(two, {"base": [0, 4, 4, 8], "rl": [1, 5, 5, 9]}, 16), "base")
    assert "(marker area: problems at a point, 1 to 2)" in figures[SCATTER_PLOT].texts[0].get_text()


def test_the_scatter_keeps_long_names_whole(tmp_path, figures):
    """Long model names make the titles wider than the figure; the saved image grows to hold them (at 120 dpi the
    figure is 360 px wide, the suptitle about 500)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    from eval.plots import plot_accuracy_vs_base

    base, other = "SmolLM2-135M-Instruct-base", "grpo_seed1_step60_long_name"
    acc = {base: {0: 0.0, 1: 0.25, 2: 0.5}, other: {0: 0.1, 1: 0.3, 2: 0.5}}
    plot_accuracy_vs_base(acc, tmp_path / "scatter.png", base)
    fig = figures["scatter.png"]
    renderer = FigureCanvasAgg(fig).get_renderer()
    (ax,) = [a for a in fig.axes if a.get_visible()]
    texts = [ax.xaxis.label, ax.yaxis.label, ax.title, *fig.texts]
    widest = max(t.get_window_extent(renderer).width for t in texts) * 120 / fig.dpi
    assert widest > fig.bbox.width * 120 / fig.dpi  # the names do not fit the figure as drawn
    width, _ = Image.open(tmp_path / "scatter.png").size
    assert width >= widest
