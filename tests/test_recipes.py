"""Recipes: each parses into its trainer's config (real-model recipes with CPU overrides: bf16 needs a GPU) and passes
the pre-load checks; none trains on data that a recipe or a page of the docs evaluates on; each real-model recipe names
its evaluation on the held-out split; the built-in tasks keep their train and test prompts apart.

Offline: recipes that train on hub data get a local train fixture (``tests/fixtures``) in place of the hub, and those
that train on a user download under ``data/`` get a small directory of the same layout."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.recipe import parse_recipe, validate
from rlvr_div.tasks import TASKS, data_source, get_task, get_task_spec
from rlvr_div.tasks import math as math_tasks
from rlvr_div.tasks.data import data_roots
from rlvr_div.tasks.synth_sql import build_synthetic_db

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes").glob("*/*.yaml"))
REAL = [r for r in RECIPES if r.parent.name in ("math", "sql")]
CPU = ["--bf16", "false", "--use_cpu", "true"]
USER_DATA = "data/"  # where recipes expect the user's downloads (Spider, BIRD); see docs/rewards.md
HELD_OUT = {"test", "dev", "validation"}  # split names that are evaluation data in every task here
FIXTURES = REPO / "tests" / "fixtures"
HUB_FIXTURES = {  # (hub id, split) -> a local file of the same format
    ("openai/gsm8k", "train"): FIXTURES / "gsm8k_train.jsonl",
    ("DigitalLearningGmbH/MATH-lighteval", "train"): FIXTURES / "math_train.jsonl",
}
DOCS = sorted([*REPO.glob("*.md"), *(REPO / "docs").rglob("*.md"), *(REPO / "launch").glob("*.md")])


def _ids(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


def _recipe(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


# --------------------------------------------------------------------------------------------- local stand-ins


def _user_data_fixture(task: str, root: Path) -> Path:
    """A small directory in the layout the user's download has (Spider or BIRD), around the synthetic database."""
    db = build_synthetic_db(root / "src.sqlite", seed=0)
    questions = [
        {"db_id": "company", "question": "How many employees are there?", "query": "SELECT count(*) FROM employees"},
        {"db_id": "company", "question": "List the department names.", "query": "SELECT name FROM departments"},
    ]
    if task == "spider":
        directory = root / "spider"
        (directory / "database" / "company").mkdir(parents=True)
        (directory / "database" / "company" / "company.sqlite").write_bytes(db.read_bytes())
        (directory / "train_spider.json").write_text(json.dumps(questions))
        return directory
    if task == "bird":
        directory = root / "bird_train"
        (directory / "train_databases" / "company").mkdir(parents=True)
        (directory / "train_databases" / "company" / "company.sqlite").write_bytes(db.read_bytes())
        records = [
            {"db_id": q["db_id"], "question": q["question"], "evidence": "", "SQL": q["query"]} for q in questions
        ]
        (directory / "train.json").write_text(json.dumps(records))
        return directory
    raise AssertionError(f"no local stand-in for the user data of task {task!r}")


def _cpu_args(recipe: Path, tmp_path: Path) -> list[str]:
    """CPU overrides, plus a local stand-in for a user download under data/ (absent on this machine)."""
    args = ["--config", str(recipe), *CPU]
    data_path = _recipe(recipe).get("data_path")
    if isinstance(data_path, str) and data_path.startswith(USER_DATA):
        args += ["--data_path", str(_user_data_fixture(_recipe(recipe)["task"], tmp_path))]
    return args


@pytest.fixture
def hub_fixtures(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str | None]]:
    """Serve the hub datasets recipes train on from local files; record every (hub id, split, config) asked for."""
    from rlvr_div.tasks.data import read_records

    asked: list[tuple[str, str, str | None]] = []

    def load_hub(hub_id: str, split: str, config: str | None = None) -> list[dict]:
        asked.append((hub_id, split, config))
        if (hub_id, split) not in HUB_FIXTURES:
            raise AssertionError(f"a recipe asked the hub for {hub_id!r} split {split!r}, which has no local fixture")
        return read_records(HUB_FIXTURES[(hub_id, split)])

    monkeypatch.setattr(math_tasks, "load_hub", load_hub)
    return asked


# --------------------------------------------------------------------------------------------- parse and build


@pytest.fixture
def hub_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hugging Face cache holding the config (no weights) of every hub model a recipe names, as after a download:
    the pre-load check finds the model offline and matches LoRA targets against its architecture's module names."""
    from huggingface_hub import constants
    from transformers import Qwen2Config

    cache, revision = tmp_path / "hub", "0" * 40
    for name in {str(_recipe(r).get("model_name_or_path")) for r in RECIPES} - {"tiny"}:
        assert name.startswith("Qwen/Qwen2.5-"), f"{name}: add its architecture to this fixture"
        repo = cache / f"models--{name.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(revision)
        config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=256)  # fmt: skip
        config.save_pretrained(repo / "snapshots" / revision)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))


@pytest.mark.parametrize("recipe", RECIPES, ids=_ids)
def test_recipe_parses_and_validates(recipe: Path, tmp_path: Path, hub_models: None) -> None:
    script, training, model = parse_recipe(_cpu_args(recipe, tmp_path))
    if getattr(training, "rehearsal_path", None) is None:
        validate(script, training, model)
    else:  # the rehearsal set is built by `rlvr-div rehearse`; everything else is checked
        validate(script, training, model, check_inputs=False)
    assert training.num_generations >= 2


@pytest.mark.parametrize("recipe", RECIPES, ids=_ids)
def test_a_run_s_resolved_recipe_reads_back_into_the_same_config(recipe: Path, tmp_path: Path) -> None:
    """``rlvr-div train --config <run>/recipe.yaml`` trains the same run: every key the resolved recipe writes out
    (TRL's ``beta`` included, which the divergence trainer derives from its plug-ins) parses back to the same
    config (a sequence-level KL's or FlowRL's resolved recipe used to fail: beta and divergence_coef disagreed)."""
    import yaml

    from rlvr_div.train import _resolved

    script, training, model = parse_recipe(_cpu_args(recipe, tmp_path))
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(_resolved(script, training, model)))
    again = parse_recipe(["--config", str(path)])[1]
    assert again.to_dict() == training.to_dict()


@pytest.mark.parametrize("recipe", REAL, ids=_ids)
def test_real_recipe_training_data_builds_offline(recipe: Path, tmp_path: Path, hub_fixtures: list) -> None:
    """The dataset `rlvr-div train` and `rlvr-div rehearse` build from the recipe (same call), from local fixtures."""
    script, _, _ = parse_recipe(_cpu_args(recipe, tmp_path))
    dataset = get_task(script.task, split=script.task_split, seed=script.task_seed, **script.task_kwargs)
    assert len(dataset) >= 2 and "prompt" in dataset.column_names
    reward_columns = {"math_accuracy": ["answer"], "sql_execution": ["gold_sql", "db_path"]}
    for column in reward_columns.get(get_task_spec(script.task).reward, ["gold_sql", "db_path"]):
        assert all(dataset[column]), column
    for hub_id, split, config in hub_fixtures:
        assert split == "train" and (config == "main") == (hub_id == "openai/gsm8k")


def test_math_fixtures_read_like_the_hub_sets() -> None:
    gsm = get_task("gsm8k", split="train", path=str(FIXTURES / "gsm8k_train.jsonl"))
    assert gsm["answer"] == ["57", "82", "3750", "14"]
    math = get_task("math", split="train", path=str(FIXTURES / "math_train.jsonl"))
    assert math["answer"] == ["7", "\\frac{3}{4}", "9"]


# --------------------------------------------------------------------------------------------- contamination


def _commands(text: str) -> list[list[str]]:
    """The arguments after every `rlvr-div eval` in ``text`` (YAML comments and backslash continuations joined)."""
    lines = [re.sub(r"^\s*#\s?", "", line) for line in text.splitlines()]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if "rlvr-div eval" in line:
            out.append(line.split("rlvr-div eval", 1)[1].split("`")[0].split())  # commands here quote nothing
    return out


def _eval_uses(args: list[str]) -> dict:
    """task, split and task options of one `rlvr-div eval` command (the CLI's defaults where absent)."""
    use: dict = {"task": None, "split": "test", "options": {}, "models": []}
    for flag, value in zip(args, args[1:]):
        if flag == "--task":
            use["task"] = value
        elif flag == "--split":
            use["split"] = value
        elif flag == "--task-arg":
            key, _, v = value.partition("=")
            use["options"][key] = v
        elif flag == "--model":
            use["models"].append(value.partition("=")[2])
    return use


def _evaluations() -> list[tuple[str, dict]]:
    """Every evaluation a recipe header or a page of the docs runs: (where, its uses)."""
    found = []
    for path in [*RECIPES, *DOCS]:
        for args in _commands(path.read_text()):
            use = _eval_uses(args)
            if use["task"] is not None and use["task"] in TASKS:
                found.append((str(path.relative_to(REPO)), use))
    return found


def _source(task: str, split: str, options: dict) -> str:
    return data_source(task, split, **{k: v for k, v in options.items() if v is not None})


def test_the_docs_and_recipes_evaluate_somewhere() -> None:
    where = {w for w, _ in _evaluations()}
    assert any(w.startswith("recipes/") for w in where) and any(w.startswith("docs/") for w in where), where


def _contamination(task: str, split: str, options: dict, evaluations: list | None = None) -> str | None:
    """Why training on (task, split, options) would train on evaluation data (``evaluations``: default, every
    evaluation of the recipes and docs), or None."""
    if split in HELD_OUT:
        return f"split {split!r} is an evaluation split"
    train = _source(task, split, options)
    uses = _evaluations() if evaluations is None else evaluations
    evaluated = {_source(u["task"], u["split"], u["options"]): w for w, u in uses}
    if train in evaluated:
        return f"{train} is evaluated on in {evaluated[train]}"
    if train.startswith("file:"):  # the shared data holds test sets only
        trained = Path(train[len("file:") :])
        for root in data_roots():
            if trained.is_relative_to(root.resolve()):
                return f"{trained} is shared test data"
    return None


@pytest.mark.parametrize("recipe", RECIPES, ids=_ids)
def test_no_recipe_trains_on_evaluation_data(recipe: Path) -> None:
    script, _, _ = parse_recipe(["--config", str(recipe), *CPU])  # the task, split and data path as a run reads them
    assert _contamination(script.task, script.task_split, script.task_kwargs) is None


def test_the_contamination_check_catches_what_the_recipes_used_to_do() -> None:
    """The math recipes trained on the shared GSM8K test file and the SQL recipes on Spider dev."""
    shared = data_roots()[0]
    reason = _contamination("gsm8k", "train", {"path": str(shared / "math/gsm8k/test.jsonl")})
    assert "shared test data" in reason or "is evaluated on in " in reason  # the headers and docs evaluate on it
    assert "evaluation split" in _contamination("spider", "dev", {"path": str(shared / "sql/spider_dev")})
    assert _contamination("gsm8k", "train", {"path": "openai/gsm8k"}) is None
    mine = [("docs/x.md", {"task": "gsm8k", "split": "test", "options": {"path": "mine/gsm8k.jsonl"}})]
    reason = _contamination("gsm8k", "train", {"path": "mine/gsm8k.jsonl"}, mine)  # a file is the data, any split
    assert reason is not None and "evaluated on in docs/x.md" in reason


@pytest.mark.parametrize("recipe", REAL, ids=_ids)
def test_real_recipe_header_gives_its_held_out_evaluation(recipe: Path) -> None:
    cfg = _recipe(recipe)
    header = "\n".join(line for line in recipe.read_text().splitlines() if line.startswith("#"))
    uses = [_eval_uses(args) for args in _commands(header)]
    mine = [u for u in uses if cfg["output_dir"] in u["models"]]
    assert mine, f"{_ids(recipe)}: no `rlvr-div eval ... --model NAME={cfg['output_dir']}` in its header"
    script, _, _ = parse_recipe(["--config", str(recipe), *CPU])
    train = _source(script.task, script.task_split, script.task_kwargs)
    for use in mine:
        assert use["split"] in HELD_OUT
        assert get_task_spec(use["task"]).reward == get_task_spec(cfg["task"]).reward  # the same kind of problem
        assert _source(use["task"], use["split"], use["options"]) != train
        if str(cfg.get("data_path", "")).startswith(USER_DATA):  # one download: the eval reads beside the training
            trained, evaluated = Path(script.data_path).resolve(), Path(use["options"]["path"]).resolve()
            assert evaluated in (trained, trained.parent / evaluated.name), (trained, evaluated)


@pytest.mark.parametrize("recipe", REAL, ids=_ids)
def test_real_recipe_header_evaluation_runs_offline(recipe: Path) -> None:
    """The evaluation a header prints reads local data (the shared test copies, or the user's download beside the
    training data), never the Hugging Face Hub: it runs where only the model is cached."""
    header = "\n".join(line for line in recipe.read_text().splitlines() if line.startswith("#"))
    for use in (_eval_uses(args) for args in _commands(header)):
        source = _source(use["task"], use["split"], use["options"])
        assert not source.startswith("hub:"), f"{_ids(recipe)}: its eval command reads {source}"


# --------------------------------------------------------------------------------------------- built-in tasks


BUILT_IN = [name for name in TASKS.names() if get_task_spec(name).source is None]


def _prompts(name: str, split: str, tmp_path: Path) -> set[str] | None:
    """The prompts of a built-in task's split, or None when the task has no such split."""
    options = {"db_dir": str(tmp_path)} if name == "synth_sql" else {}
    try:
        rows = get_task(name, split=split, **options)
    except ConfigError:
        return None
    return {json.dumps(p, sort_keys=True) for p in rows["prompt"]}


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_tasks_keep_their_splits_apart(name: str, tmp_path: Path) -> None:
    splits = {s: _prompts(name, s, tmp_path) for s in ("train", "validation", "test")}
    assert splits["train"] and splits["test"], f"{name} needs a train and a test split"
    present = {s: p for s, p in splits.items() if p is not None}
    for a, b in itertools.combinations(present, 2):
        shared = present[a] & present[b]
        assert not shared, f"{name}: {len(shared)} prompts are in both {a} and {b}, e.g. {sorted(shared)[0]}"


def test_built_in_tasks_include_the_synthetic_ones() -> None:
    assert {"arith", "pairsum", "synth_sql"} <= set(BUILT_IN)
