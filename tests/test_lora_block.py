"""collapse_bench.lora_block: one seed's α-DPG − GRPO under several LoRA settings, from hand-made finished runs."""

import dataclasses
import json
from pathlib import Path

import pytest

from collapse_bench.beta_spec import load_study, run_identity, study_runs
from collapse_bench.lora_block import main, setting
from eval.records import write_json

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _finish(study, out: Path, arm: str, seed: int, path: list[tuple[float, float, float]]) -> None:
    """A finished run of ``arm`` at ``seed`` whose training path has the points (μ, KL(p*‖π_v), effective answers)."""
    run = next(r for r in study_runs(study) if r.arm == arm and r.seed == seed)
    points = [{"step": 5 * i, "mu": m, "kl_pstar": kl, "effective_answers": eff} for i, (m, kl, eff) in enumerate(path)]
    end = {"mu": path[-1][0], "pass_at": {"64": 0.5 if arm == "grpo" else 0.75}}
    result = {"run": {"arm": arm, "beta": run.beta, "seed": seed}, "identity": run_identity(study, run),
              "path": points, "steps": 5 * (len(path) - 1),
              "splits": {s: {"mean": end} for s in ("train", "test")}}  # fmt: skip
    (out / "runs" / run.key).mkdir(parents=True)
    write_json(out / "runs" / run.key / "result.json", result)


def test_the_lora_settings_are_read_from_each_config():
    assert setting(load_study(BENCH / "real_lm_countries.yaml")) == {
        "lora_r": 16, "lora_alpha": 32, "blocks": "blocks 22–29", "learning_rate": 4e-4}  # fmt: skip
    assert setting(load_study(BENCH / "real_lm_countries_lora_all.yaml"))["blocks"] == "every block"
    lr = setting(load_study(BENCH / "real_lm_countries_lora_lr1e-4.yaml"))
    assert lr["learning_rate"] == 1e-4 and lr["lora_r"] == 16
    assert setting(load_study(BENCH / "real_lm_countries_lora_r4.yaml"))["lora_r"] == 4
    study = load_study(BENCH / "real_lm_countries.yaml")
    gaps = dataclasses.replace(study, common={"lora_target_modules": ["layers.3.q_proj", "layers.5.q_proj"]})
    assert setting(gaps)["blocks"] == "blocks 3, 5"
    assert setting(dataclasses.replace(study, common={}))["blocks"] == "recipe's"


def test_the_block_reads_each_setting_at_matched_validity(tmp_path, capsys):
    default, r4 = tmp_path / "default", tmp_path / "r4"
    for d in (default, r4):
        d.mkdir()
    study = load_study(BENCH / "real_lm_countries.yaml")
    _finish(study, default, "grpo", 1, [(0.2, 0.0, 2.0), (0.6, 0.4, 1.5), (1.0, 2.4, 1.0)])
    _finish(study, default, "alpha_dpg", 1, [(0.2, 0.0, 2.0), (0.7, 0.1, 1.8)])
    _finish(study, default, "grpo", 2, [(0.2, 0.0, 2.0), (0.6, 9.0, 9.0)])  # another seed: not read
    # the rank-4 setting's GRPO run only; a run written under the default setting's identity would not count
    _finish(load_study(BENCH / "real_lm_countries_lora_r4.yaml"), r4, "grpo", 1, [(0.2, 0.0, 2.0), (0.8, 1.0, 1.2)])
    out = tmp_path / "block"
    main([f"{BENCH / 'real_lm_countries.yaml'}={default}", f"{BENCH / 'real_lm_countries_lora_r4.yaml'}={r4}",
          "--out", str(out), "--levels", "0.6", "0.8"])  # fmt: skip
    rows = list(json.loads((out / "lora_block.json").read_text())["rows"].values())
    # μ 0.6: α-DPG at 0.08 (0.8 of the way from μ 0.2 to 0.7), GRPO at 0.4 → −0.32; effective answers 1.84 − 1.5
    first = rows[0]["matched"][0]
    assert first["kl_pstar"] == pytest.approx(-0.32) and first["effective_answers"] == pytest.approx(0.34)
    assert rows[0]["matched"][1]["kl_pstar"] is None  # α-DPG's path ends at μ 0.7
    assert rows[0]["arms"]["alpha_dpg"] == {"steps": 5, "mu": 0.7, "test_pass_kmax": 0.75}
    assert rows[1]["arms"]["alpha_dpg"] is None and rows[1]["arms"]["grpo"]["mu"] == 0.8
    text = (out / "lora_block.md").read_text()
    assert "| 4 (8) | blocks 22–29 | 0.0004 | not run yet | 5, 0.800, 0.500 | — / — | — / — |" in text
    assert "-0.320 / —" in text and capsys.readouterr().out == text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench/real_lm_countries.yaml"], "a setting is CONFIG=DIR"),
        (["bench/real_lm_countries.yaml=/nonexistent"], "is not a directory"),
        (["bench/real_lm_countries.yaml=.", "--arm", "dpo"], "'dpo' names no arm"),
    ],
)
def test_a_bad_setting_is_one_line(argv, message, tmp_path):
    from rlvr_div.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        main([*(a.replace("bench/", f"{BENCH}/") for a in argv), "--out", str(tmp_path)])


def test_settings_measured_at_different_k_are_refused(tmp_path, monkeypatch):
    """The block's pass@k column has one k: settings whose largest k differ are one ConfigError line."""
    from collapse_bench import lora_block
    from rlvr_div.errors import ConfigError

    def load(config):
        study = load_study(config)
        return dataclasses.replace(study, ks=(1, 8)) if "r4" in str(config) else study

    monkeypatch.setattr(lora_block, "load_study", load)
    settings = [
        f"{BENCH / 'real_lm_countries.yaml'}={tmp_path}",
        f"{BENCH / 'real_lm_countries_lora_r4.yaml'}={tmp_path}",
    ]
    with pytest.raises(ConfigError, match=r"different k \(\[8, 64\]\)"):
        main([*settings, "--out", str(tmp_path / "block")])
