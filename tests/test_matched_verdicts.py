"""collapse_bench.matched_verdicts: the held-out class read on GRPO's path at a method's last training validity,
beside the end-of-training verdicts; on synthetic paths, and on the committed `routes` results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collapse_bench.matched_verdicts import joined_path, main, matched_gain

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "collapse_routes"


def _path(points: list[tuple[int, float, float]]) -> list[dict]:
    return [{"step": s, "mu": m, "held": h} for s, m, h in points]


def test_a_method_that_trains_less_is_read_where_grpo_had_its_validity():
    grpo = {s: _path([(0, 0.8, 0.2), (10, 0.9, 0.1), (20, 1.0, 0.0)]) for s in (1, 2, 3)}
    less = {1: _path([(0, 0.8, 0.2), (10, 0.85, 0.15)]), 2: _path([(0, 0.8, 0.2), (10, 0.9, 0.2)]),
            3: _path([(0, 0.8, 0.2), (10, 0.95, 0.05)])}  # fmt: skip
    out = matched_gain(less, grpo)
    assert out["seeds"] == [1, 2, 3]
    assert out["gains"] == pytest.approx([0.0, 0.1, 0.0])  # seed 1 trains less and keeps only what GRPO kept there
    assert out["ends"][2]["baseline_held"] == pytest.approx(0.1)
    beyond = matched_gain({1: _path([(0, 0.8, 0.2), (10, 1.01, 0.9)])}, grpo)  # past GRPO's range: not matched
    assert beyond["seeds"] == [] and beyond["ci"] is None and beyond["ends"][1]["baseline_held"] is None


def test_paths_join_training_and_held_out_points_by_step():
    result = {"trajectory": [{"step": 0, "mu": 0.8}, {"step": 5, "mu": 0.85}, {"step": 10, "mu": 0.9}],
              "trajectory_held_out": [{"step": 0, "mu_long": 0.2}, {"step": 10, "mu_long": 0.1}]}  # fmt: skip
    assert joined_path(result, "long") == _path([(0, 0.8, 0.2), (10, 0.9, 0.1)])


def test_on_routes_the_referees_matched_reading_and_mara_beyond_grpos_range(tmp_path, capsys):
    if not (RESULTS / "collapse.json").is_file():
        pytest.skip("bench/results/collapse_routes is not committed")
    committed = json.loads((RESULTS / "matched_verdicts.json").read_text())
    cells = committed["cells"]
    gain = {c: v["matched"]["ci"]["mean"] for c, v in cells.items() if v["matched"] and v["matched"]["ci"]}
    assert round(gain["passk_training"], 3) == -0.005 and round(gain["pkpo"], 3) == 0.033
    assert all(0.08 < gain[c] < 0.13 for c in ("reverse_kl_1", "forward_kl_1", "sequence_kl_03", "dph_forward_kl_05"))
    assert cells["mara_01"]["matched"]["seeds"] == []  # its training validity ends above every GRPO path's
    assert (
        cells["mara_01"]["held_end"] > 0.9
        and cells["mara_01"]["kl_pstar"]["mean"] > 10 * cells["grpo"]["kl_pstar"]["mean"]
    )
    docs = " ".join((Path(__file__).resolve().parents[1] / "docs" / "study" / "collapse.md").read_text().split())
    assert "Pass@k Training −0.005" in docs and "PKPO +0.033" in docs
    four = [gain[c] for c in ("reverse_kl_1", "forward_kl_1", "sequence_kl_03", "dph_forward_kl_05")]
    assert (
        f"+{min(four):.3f} to +{max(four):.3f}" in docs and f"unlikeliness reward +{gain['unlikeliness']:.3f}" in docs
    )
    assert f"({cells['mara_01']['mu']['mean']:.3f}) ends above every GRPO path's" in docs
    bench = tmp_path / "routes"
    bench.mkdir()
    (bench / "runs").symlink_to(RESULTS / "runs")
    (bench / "collapse.json").symlink_to(RESULTS / "collapse.json")
    assert main(["--bench", str(bench)]) == 0  # recomputed from the per-run files: what is committed
    assert json.loads((bench / "matched_verdicts.json").read_text())["cells"] == cells
    assert main(["--bench", str(tmp_path / "none")]) == 2 and "no report at" in capsys.readouterr().err
