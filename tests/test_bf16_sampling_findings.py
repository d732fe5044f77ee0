"""What docs/benchmarks_details.md and docs/benchmarks.md say of the bfloat16 sampling check, against its committed
result (bench/results/bf16_sampling_check/smollm2_wordmath.json), and that eval's default follows the rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "bf16_sampling_check" / "smollm2_wordmath.json"


def test_the_check_met_its_rule_and_the_pages_say_what_it_measured():
    r = json.loads(RESULT.read_text())
    assert r["second_dtype"] == "bfloat16" and r["problems"] == 200 and r["n"] == 8 and "amx_bf16" in r["cpu"]
    d1, d8 = r["pass_at_1_diff"], r["pass_at_8_diff"]
    assert d1["lo"] < 0 < d1["hi"] and d8["lo"] < 0 < d8["hi"]  # the rule: both intervals include 0
    assert (round(r["pass_at_1"]["float32"], 4), round(r["pass_at_1"]["bfloat16"], 4)) == (0.0206, 0.0194)
    assert (round(r["pass_at_8"]["float32"], 3), round(r["pass_at_8"]["bfloat16"], 3)) == (0.135, 0.125)
    assert (round(d1["mean"], 4), round(d1["half"], 4), round(d8["mean"], 3), round(d8["half"], 3)) == (
        -0.0013, 0.0061, -0.01, 0.042)  # fmt: skip
    tv = r["token_tv"]
    assert (tv["tokens"], round(tv["mean"], 3), round(tv["p99"], 3), round(tv["max"], 3)) == (6149, 0.015, 0.047, 0.105)
    assert tv["completions_left_out"] == 1 and r["settings"]["tv_problems"] * r["n"] - 1 == 159
    assert round(100 * r["identical_completions"], 1) == 22.7 and round(d1["half"] / 0.02, 1) == 0.3  # "about ±30%"
    words = " ".join((ROOT / "docs" / "benchmarks_details.md").read_text().split())
    assert (
        "| pass@1 | 0.0206 | 0.0194 | −0.0013 ± 0.0061 |" in words
        and "| pass@8 | 0.135 | 0.125 | −0.010 ± 0.042 |" in words
    )
    assert "22.7% are identical" in words and "over 6,149 tokens. That is 159 of the 160 completions" in words
    assert "0.015 on average, 0.047 at the 99th percentile, and 0.105 at most" in words
    summary = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    assert "pass@1 −0.0013 ± 0.0061, pass@8 −0.010 ± 0.042" in summary and "per-token TV 0.015" in summary


def test_the_sampling_rates_on_the_amx_machine_as_the_pages_say():
    """bench/results/real_lm_sampling/smollm2_b32_amx.log (bench_real_lm_sampling.py's printout) and the tables."""
    text = (ROOT / "bench" / "results" / "real_lm_sampling" / "smollm2_b32_amx.log").read_text()
    assert "CPU with native bfloat16 (amx_bf16, avx512_bf16)" in text
    found = re.findall(r"tokens=\s+40\s+(.+?)\s+([\d.]+) tok/s .* ×([\d.]+) of generate fp32", text)
    rows = {path: (float(rate), float(ratio)) for path, rate, ratio in found}
    assert len(rows) == 6
    assert rows["sampler bf16"] == (459.8, 3.08) and rows["generate fp32"] == (152.2, 1.0)
    assert rows["sampler bf16"][1] >= 3 > rows["sampler bf16 top-p 0.95"][1]  # "met here, narrowly"
    assert round(rows["sampler bf16"][0] / rows["sampler fp32"][0], 2) == 1.75  # "1.75× faster again"
    words = " ".join((ROOT / "docs" / "benchmarks_details.md").read_text().split())
    assert "| 32 | `HFSampler` bfloat16 (eval's default here) | 459.8 | 12.8% | **3.08** |" in words
    assert "3.08× a bare float32 `generate` at B 32, but 12.8% of the bfloat16 bound" in " ".join(
        (ROOT / "docs" / "benchmarks.md").read_text().split()
    )
