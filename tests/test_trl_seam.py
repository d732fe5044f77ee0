"""The TRL seam (:mod:`rlvr_div.trainers.trl_seam`): the installed TRL still has every private name the project
overrides, reads, writes or patches, with the listed parameters and still calling or using it where listed; every
``_``-override of a TRL name in a project trainer is listed; no file of ``rlvr_div`` touches a private name of a
listed TRL class without being listed; and the checks are not vacuous: each fails on a removed or changed name."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest
import transformers
from trl import GRPOTrainer

from rlvr_div.trainers import TRAINERS
from rlvr_div.trainers.trl_seam import (
    KINDS,
    SEAM_PY,
    TRL_NAMES,
    USES,
    TRLName,
    check_name,
    check_seam,
    init_attributes,
    resolve,
    unlisted_overrides,
)

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_PATCH_TARGETS = {"sync_weights", "LLM", "eos_token_ids", "generation_config"}  # public, but patched
# a project name that coincides with a private TRL name on an object that is not TRL's
NOT_TRL = {("rlvr_div/sampling.py", "_generate")}  # Sampler._generate, the sampler's own method


def project_trainer_classes() -> list[type]:
    """The trainer classes of the registry that the project defines (not TRL's stock ``GRPOTrainer``)."""
    classes = [TRAINERS.get(name).trainer_class() for name in TRAINERS.names()]
    return [c for c in classes if c.__module__.startswith("rlvr_div.")]


def entry(name: str) -> TRLName:
    return next(e for e in TRL_NAMES if e.name == name)


# ---------------------------------------------------------------------------------------------------------------------
# The installed TRL against the listing


def test_the_installed_trl_matches_the_seam():
    problems = check_seam()
    assert not problems, "TRL differs from rlvr_div/trainers/trl_seam.py (docs/contributing.md, 'The TRL seam'):\n" + (
        "\n".join(problems)
    )


def test_the_listing_is_well_formed():
    assert len({e.label for e in TRL_NAMES}) == len(TRL_NAMES)
    for e in TRL_NAMES:
        assert e.kind in KINDS and e.uses and set(e.uses) <= set(USES), e.label
        assert (e.params is not None) == (e.kind == "method"), e.label
        assert e.name.startswith("_") or e.name in PUBLIC_PATCH_TARGETS, e.label
        assert e.note and e.where, e.label
        assert all((ROOT / path).is_file() for path in e.where), e.label
        if e.kind == "instance_attribute":
            assert e.where == (SEAM_PY,), f"{e.label}: TRL's private state is read and written only through the seam"


def test_each_listed_file_touches_its_name():
    stale = [f"{path}: {e.label}" for e in TRL_NAMES for path in e.where if e.name not in (ROOT / path).read_text()]
    assert not stale, "listed but no longer touched (update trl_seam.py): " + ", ".join(stale)


# ---------------------------------------------------------------------------------------------------------------------
# Every override and every direct access goes through the listing


def test_every_private_override_of_a_project_trainer_is_listed():
    classes = project_trainer_classes()
    assert "DivergenceGRPOTrainer" in {c.__name__ for c in classes}
    unlisted = [name for cls in classes for name in unlisted_overrides(cls)]
    assert not unlisted, "private TRL names overridden but not listed in trl_seam.py: " + ", ".join(unlisted)


def test_every_listed_override_is_overridden():
    defined = {name for cls in project_trainer_classes() for k in cls.__mro__ if k.__module__.startswith("rlvr_div.")
               for name in vars(k)}  # fmt: skip
    stale = [e.label for e in TRL_NAMES if "override" in e.uses and e.name not in defined]
    assert not stale, "listed as overridden but no project trainer defines them: " + ", ".join(stale)


@functools.cache
def private_names_of_listed_owners() -> frozenset[str]:
    """Every ``_``-name (no dunders) of a listed TRL class or its bases, including those set in an ``__init__``."""
    names: set[str] = set()
    for e in TRL_NAMES:
        owner = resolve(e.owner)
        if not isinstance(owner, type):
            continue
        names |= set(init_attributes(owner))
        names |= {n for k in owner.__mro__ if k is not object for n in vars(k)}
    return frozenset(n for n in names if n.startswith("_") and not (n.startswith("__") and n.endswith("__")))


def direct_accesses(text: str, names: frozenset[str]) -> set[str]:
    """The names of ``names`` that ``text`` accesses as an attribute (``x._name``)."""
    return {m.group(1) for m in re.finditer(r"\.(_\w+)", text) if m.group(1) in names}


def test_no_file_touches_a_private_trl_name_unlisted():
    names = private_names_of_listed_owners()
    listed = {(path, e.name) for e in TRL_NAMES for path in e.where}
    found = defaultdict(list)
    for path in sorted((ROOT / "rlvr_div").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == SEAM_PY:
            continue
        for name in direct_accesses(path.read_text(encoding="utf-8"), names):
            if (rel, name) not in listed and (rel, name) not in NOT_TRL:
                found[rel].append(name)
    assert not found, f"private TRL names touched outside the seam's listing (add them to trl_seam.py): {dict(found)}"


def test_the_access_scan_sees_a_new_access():
    names = private_names_of_listed_owners()
    assert {"_metrics", "_pending_metrics", "_prepare_inputs"} <= names
    text = "x = trainer._pending_metrics\nself._prepare_inputs(batch)\nself._own_thing = 1\n"
    assert direct_accesses(text, names) == {"_pending_metrics", "_prepare_inputs"}


# ---------------------------------------------------------------------------------------------------------------------
# The checks are not vacuous: each reports a removed or changed name


def test_check_seam_reports_a_removed_method(monkeypatch):
    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")
    problems = check_seam()
    assert any(p.startswith("trl:GRPOTrainer._calculate_rewards (override in ") and p.endswith(": missing")
               for p in problems), problems  # fmt: skip
    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    assert "_calculate_rewards" in vars(DivergenceGRPOTrainer)  # the override that would silently never run


REMOVABLE = [e for e in TRL_NAMES if e.kind in ("method", "class_attribute")]


@pytest.mark.parametrize("e", REMOVABLE, ids=lambda e: e.label)
def test_each_removed_class_name_is_reported(monkeypatch, e):
    """TRL renames the name: it is gone from the owner and from every base that defined it (an override of a base's
    method, e.g. ``GRPOTrainer._save_checkpoint`` of ``Trainer``'s, alone is not a rename: the base's still runs)."""
    owner = resolve(e.owner)
    assert not check_name(e)
    for klass in owner.__mro__:
        if e.name in vars(klass):
            monkeypatch.delattr(klass, e.name)
    assert any(p.endswith(": missing") for p in check_name(e)), check_name(e)


def test_a_changed_parameter_list_is_reported(monkeypatch):
    def _compute_loss(self, model, batch):  # TRL renamed `inputs`
        return None

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", _compute_loss)
    problems = check_seam()
    assert any("_compute_loss" in p and "parameters changed" in p and "'batch'" in p for p in problems), problems


def test_a_transformers_trainer_change_is_reported(monkeypatch):
    monkeypatch.delattr(transformers.Trainer, "_issue_warnings_after_load")
    assert any(p.startswith("transformers:Trainer._issue_warnings_after_load") for p in check_seam())


def _init_without_controller_state(self, model, reward_funcs, args=None):
    self._metrics = {"train": {}, "eval": {}}
    self._logs = {"prompt": [], "completion": []}  # no "advantages", no "rewards"
    self._entropy_bonus_enabled = False
    self._entropy_window_stats = None


def test_a_removed_instance_attribute_or_key_is_reported(monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "__init__", _init_without_controller_state)
    problems = check_seam()
    assert any(p.startswith("trl:GRPOTrainer._last_world_entropy") and "no longer set" in p for p in problems)
    assert any(p.startswith("trl:GRPOTrainer._logs") and "['advantages', 'rewards'] missing" in p for p in problems)
    assert not [p for p in problems if p.startswith(("trl:GRPOTrainer._metrics", "trl:GRPOTrainer._entropy_window"))]


def _prepare_inputs_elsewhere(self, generation_batch):
    return self._generate_and_score(generation_batch)  # TRL renamed the method it calls


def test_an_override_trl_no_longer_calls_is_reported(monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "_prepare_inputs", _prepare_inputs_elsewhere)
    problems = check_name(entry("_generate_and_score_completions"))
    assert problems == [
        "trl:GRPOTrainer._generate_and_score_completions (override in rlvr_div/trainers/grpo.py): "
        "trl:GRPOTrainer._prepare_inputs no longer calls it"
    ]


def test_a_module_global_is_found_in_the_source_and_a_missing_one_reported():
    llm = entry("LLM")
    assert not check_name(llm)  # bound by TRL's `from vllm import LLM`, with or without vllm installed
    assert check_name(dataclasses.replace(llm, name="NoSuchLLM")) == [
        "trl.generation.vllm_generation.NoSuchLLM (patch in rlvr_div/trainers/trl_seam.py): missing"
    ]


def test_a_new_unlisted_override_is_reported():
    from rlvr_div.trainers.grpo import DivergenceGRPOTrainer

    class Sneaky(DivergenceGRPOTrainer):
        _metrics = None  # shadows an attribute TRL sets in __init__

        def _prepare_inputs(self, generation_batch):  # a TRL method the seam does not list
            return super()._prepare_inputs(generation_batch)

        def _own_helper(self):  # not TRL's: fine
            return None

    where = f"{__name__}:{Sneaky.__qualname__}"
    assert sorted(unlisted_overrides(Sneaky)) == [f"{where}._metrics", f"{where}._prepare_inputs"]
    assert not unlisted_overrides(DivergenceGRPOTrainer)
    without = [e for e in TRL_NAMES if e.name != "_compute_loss"]
    assert unlisted_overrides(DivergenceGRPOTrainer, without) == [
        "rlvr_div.trainers.grpo:DivergenceGRPOTrainer._compute_loss"
    ]


# ---------------------------------------------------------------------------------------------------------------------
# The accessors read and write TRL's own state


def test_the_accessors_read_and_write_the_trainers_state():
    from rlvr_div.trainers import trl_seam

    class Fake:
        pass

    t = Fake()
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t._logs = {"advantages": [1.0]}
    t._entropy_bonus_enabled, t._last_world_entropy, t._entropy_window_stats = True, float("inf"), None
    trl_seam.metrics(t, "eval")["x"].append(2.0)
    assert t._metrics["eval"]["x"] == [2.0] and trl_seam.logged_advantages(t) is t._logs["advantages"]
    trl_seam.set_last_world_entropy(t, 0.5)
    trl_seam.set_entropy_window(t, (1.0, 2.0))
    assert trl_seam.entropy_bonus_enabled(t) and trl_seam.last_world_entropy(t) == 0.5
    assert trl_seam.entropy_window(t) == (1.0, 2.0) == t._entropy_window_stats
