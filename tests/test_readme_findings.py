"""The README's synthetic and real-LM findings (its "What the benchmarks found" section) checked against the committed
reports, so a README quantifier that stops being true fails here (issue 58, item 4). The real-math bullet is checked by
tests/test_real_math_findings.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _bullet(starts: str) -> str:
    """The README bullet that starts with `starts`, whitespace collapsed."""
    lines = (ROOT / "README.md").read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(starts))
    j = i + 1
    while j < len(lines) and lines[j].startswith("  "):
        j += 1
    return " ".join(" ".join(lines[i:j]).split())


def _json(path: Path) -> dict:
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    return json.loads(path.read_text())


SYNTHETIC = "- **Synthetic tasks, tiny bases measured exactly"


def test_routes_grpo_loss_and_the_remedies_that_lose_fewer():
    entry = _json(RESULTS / "collapse_routes" / "collapse.json")["tasks"]["routes"]
    lost = entry["methods"]["grpo"]["by_class"]["test"]["long"]["lost_at"]["64"]
    problems = entry["base_by_class"]["test"]["long"]["problems"]
    primary = entry["primary"]
    claimed = sum(row["claimed"] for row in primary["rows"].values())
    assert all(row["mean"] < 0 for row in primary["rows"].values() if row["claimed"])
    said = (
        f"stock GRPO loses {lost['mean']:.1f} ± {lost['half']:.1f} of {problems} held-out `routes` problems at k = 64;"
        f" {claimed} of {primary['family']} remedies lose fewer"
    )
    assert said in _bullet(SYNTHETIC), said


def test_mara_collapses_onto_the_minority_mode_on_routes_and_both_controls():
    """ "MARA keeps them by collapsing onto the base's minority mode, and it does so again on the control where that
    mode fails and on the one where both modes are written at one length": its minority share on held-out prompts of
    the trained class ends above 0.9 in all three, and the swapped control is the one where it loses `long`."""
    shares = {}
    for name in ("collapse_routes", "collapse_routes_swapped", "collapse_routes_equal"):
        report = _json(RESULTS / name / "collapse.json")
        (entry,) = report["tasks"].values()
        shares[name] = entry["methods"]["mara_01"]["by_class"]["test"]["short"]["minority_share"]["mean"]
    assert all(s > 0.9 for s in shares.values()), shares
    swapped = _json(RESULTS / "collapse_routes_swapped" / "collapse.json")["tasks"]["routes_swapped"]
    base_long = swapped["base_by_class"]["test"]["long"]["mu"]
    assert swapped["methods"]["mara_01"]["by_class"]["test"]["long"]["mu"]["mean"] < base_long / 10
    bullet = _bullet(SYNTHETIC)
    assert "collapsing onto the base's minority mode, and it does so again on the control where that mode fails" in (
        bullet
    )
    assert "and on the one where both modes are written at one length" in bullet


def test_countries_narrowing_and_no_remedy_separated_on_a_real_lm():
    countries = _json(RESULTS / "real_lm" / "countries" / "report.json")
    base = countries["base"]["train"]["effective_answers"]
    end = countries["arms"]["grpo"]["end"]["train"]["effective_answers"]["mean"]
    bullet = _bullet(SYNTHETIC)
    assert f"(SmolLM2: {base:.2f} → {end:.2f} effective answers)" in bullet
    for name in ("between", "countries", "countries_gemma"):
        report = _json(RESULTS / "real_lm" / name / "report.json")
        assert not any(level["supported"] for level in report["primary"]["levels"]), name
    assert "no remedy has been separated from GRPO on a real LM" in bullet
