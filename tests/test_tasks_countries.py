"""The `countries` task (a real LM's enumerable task with a skewed p*) and its verifier `country_prefix`."""

from __future__ import annotations

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.rewards import get_reward
from rlvr_div.rewards.country_prefix import COUNTRY_NAMES, MEMBER_STATES, OTHER_NAMES
from rlvr_div.tasks import get_task, get_task_spec
from rlvr_div.tasks.countries import EXAMPLES, all_prefixes, countries_valid


def test_the_name_list_is_the_193_member_states_and_names_of_them():
    assert len(MEMBER_STATES) == len(set(MEMBER_STATES)) == 193
    assert set(OTHER_NAMES.values()) <= set(MEMBER_STATES) and not set(OTHER_NAMES) & set(MEMBER_STATES)
    assert len(COUNTRY_NAMES) == 193 + 14
    assert all(n == n.strip() and "\n" not in n and n[0].isupper() for n in COUNTRY_NAMES)


def test_splits_are_disjoint_hold_at_least_32_prompts_and_exclude_the_worked_examples():
    splits = {s: get_task("countries", split=s) for s in ("train", "test")}
    prefixes = {s: set(d["prefix"]) for s, d in splits.items()}
    assert not prefixes["train"] & prefixes["test"]  # held-out prompts are prefixes training never shows
    assert prefixes["train"] | prefixes["test"] == set(all_prefixes())
    assert min(len(p) for p in prefixes.values()) >= 32  # the real-LM study measures 32 prompts per split
    assert not {p for p, _ in EXAMPLES} & set(all_prefixes())
    for d in splits.values():
        for row in d:
            valid = countries_valid(row)
            assert len(valid) >= 2 and len(row["prefix"]) in (1, 2)
            assert row["prompt"].endswith(f"A country whose name starts with {row['prefix']}:")
    assert [r["prefix"] for r in get_task("countries", seed=1)] != [r["prefix"] for r in splits["train"]]
    with pytest.raises(ConfigError, match="splits train, test"):
        get_task("countries", split="validation")


def test_the_verifier_accepts_exactly_the_enumerated_valid_set():
    reward = get_reward(get_task_spec("countries").reward)
    row = {"prefix": "Ma"}
    valid = countries_valid(row)
    assert " Madagascar\n" in valid and " Mali\n" in valid and " Mexico\n" not in valid and len(valid) == 10
    names = sorted(COUNTRY_NAMES) + ["Mars", "mali", "Mali.", "Ma", "Malawi Malawi"]
    candidates = [f"{sp}{n}{end}" for n in names for sp in ("", " ", "  ") for end in ("\n", "\nmore", "", " \n")]
    scores = reward.score(candidates, prefix=["Ma"] * len(candidates))
    accepted = {c for c, s in zip(candidates, scores) if s == 1.0}
    assert accepted == {c for c in candidates if any(c.startswith(v) for v in valid)}
    assert reward.extract(" Mali\nA country") == "Mali" and reward.extract(" Mali") is None  # an unfinished line
    assert reward.score([" Ivory Coast\n", " Côte d'Ivoire\n"], prefix=["I", "C"]) == [1.0, 1.0]  # other names count
    assert get_task_spec("countries").ends_with_eos is False


def test_the_base_profile_measures_a_split_subset_of_a_path_model(tmp_path, tiny_path):
    """``python -m collapse_bench.base_profile`` with ``--splits`` (a task without a validation split) and a model
    given as a path: the numbers the skew table of docs/study/collapse_details.md is made of."""
    import json
    import math

    from collapse_bench.base_profile import main

    out = tmp_path / "profile.json"
    assert main(["--model", str(tiny_path), "--task", "countries", "--splits", "train", "--corpus-draws", "0",
                 "--batch-size", "64", "--out", str(out)]) == 0  # fmt: skip
    split = json.loads(out.read_text())["splits"]
    assert list(split) == ["train"] and split["train"]["prompts"] == 33
    per = split["train"]["per_prompt"]
    assert all(0 <= m <= 1 for m in per["mu"]) and all(k >= -1e-9 for k in per["kl_pstar_uniform"])
    assert math.isclose(split["train"]["mean_kl_pstar_uniform"], sum(per["kl_pstar_uniform"]) / 33)
