"""The vLLM sampling backend on the tiny model (CPU build of vLLM, ``make test-vllm``; skipped without vllm).

vLLM starts an engine per ``LLM`` (about a minute on CPU), so one engine serves the in-process tests and the
end-to-end ``eval --backend vllm`` run goes through a subprocess (vLLM spawns workers; ``eval/__main__.py`` has the
``__main__`` guard that needs).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from rlvr_div.logprobs import token_logprobs  # noqa: E402
from rlvr_div.sampling import SamplingConfig, VLLMSampler  # noqa: E402

PROMPTS = ["3+4=", "17+9=", "sum 12:", "25-8=", "sum 40:", "6+6="]
REPO = Path(__file__).resolve().parents[1]
ENGINE = {"max_model_len": 64, "dtype": "float32", "enforce_eager": True}


@pytest.fixture(scope="module")
def engine(tiny_path):
    from rlvr_div.models import load_model, load_tokenizer

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    tok = load_tokenizer(tiny_path)
    sampler = VLLMSampler(tiny_path, tok, SamplingConfig(n=8, max_new_tokens=6), **ENGINE)
    yield sampler, load_model(tiny_path).eval(), tok
    del sampler.llm  # shut the engine down now, not in an exit hook after pytest closed its streams
    gc.collect()


def sample(engine, prompts, indices=None, logprobs=False, **cfg):
    sampler = engine[0]
    cfg.setdefault("max_new_tokens", 6)
    sampler.config = SamplingConfig(**cfg)
    return list(sampler.sample(prompts, indices, logprobs=logprobs, progress=False))


def test_completions_are_text_ids_and_stop_on_eos(engine):
    _, _, tok = engine
    out = sample(engine, PROMPTS, n=4)
    assert [r.index for r in out] == list(range(len(PROMPTS)))
    for r in out:
        assert r.prompt_ids == tok(r.prompt)["input_ids"] and len(r.completions) == 4
        for text, ids, reason in zip(r.completions, r.completion_ids, r.finish_reasons):
            assert reason == "stop" and ids[-1] == tok.eos_token_id
            assert text == tok.decode(ids, skip_special_tokens=True) and text


def test_samples_depend_on_seed_and_index_not_on_the_batch(engine):
    together = sample(engine, PROMPTS, n=6, seed=3, batch_size=64)
    alone = [sample(engine, [p], [i], n=6, seed=3, batch_size=6)[0] for i, p in enumerate(PROMPTS)]
    assert [r.completion_ids for r in together] == [r.completion_ids for r in alone]
    other = sample(engine, PROMPTS, n=6, seed=4, batch_size=64)
    assert [r.completion_ids for r in together] != [r.completion_ids for r in other]


def test_first_token_frequencies_match_the_model(engine):
    _, model, tok = engine
    n = 1500
    out = sample(engine, ["sum 30:"], n=n, max_new_tokens=1, batch_size=n, seed=5)[0]
    ids = torch.tensor(tok("sum 30:")["input_ids"])[None]
    with torch.no_grad():
        q = torch.softmax(model(ids).logits[0, -1].double(), -1)
    freq = torch.bincount(torch.tensor([c[0] for c in out.completion_ids]), minlength=q.numel()).double() / n
    se = (q * (1 - q) / n).sqrt()
    assert torch.all((freq - q).abs() <= 5 * se + 2e-3), (freq, q)


def test_logprobs_match_the_hf_model(engine):
    _, model, tok = engine
    for temperature in (1.0, 0.7):
        out = sample(engine, PROMPTS, logprobs=True, n=4, temperature=temperature)
        prompts = [r.prompt_ids for r in out for _ in r.completion_ids]
        comps = [c for r in out for c in r.completion_ids]
        ref = token_logprobs(model, prompts, comps, temperature=temperature, pad_token_id=tok.pad_token_id)
        got = [lp for r in out for lp in r.logprobs]
        for g, w in zip(got, ref):
            assert g == pytest.approx(w, abs=2e-3)


def _eval_vllm(out: Path, model: str) -> tuple[dict, dict[int, dict]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    cmd = [
        sys.executable, "-m", "eval", "--model", model, "--task", "pairsum", "--n", "8", "--limit", "10",
        "--max-new-tokens", "8", "--backend", "vllm", "--quiet", "--output-dir", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = model.split("=")[0]
    res = json.loads((out / name / "results.json").read_text())
    recs = [json.loads(x) for x in (out / name / "samples.jsonl").read_text().splitlines()]
    return res, {r["index"]: r for r in recs}


def test_eval_cli_with_the_vllm_backend_and_a_lora_adapter(tmp_path, tiny_path):
    """`python -m eval --backend vllm` end to end, on the base and on a zero-initialised LoRA adapter of it (served
    with vLLM's LoRA support; B = 0, so it samples exactly what the base samples)."""
    from peft import get_peft_model

    from rlvr_div.models import load_model, lora_config

    res, recs = _eval_vllm(tmp_path / "a", f"base={tiny_path}")
    assert res["config"]["backend"] == "vllm" and len(recs) == 10 and all(r["n"] == 8 for r in recs.values())
    assert res["metrics"]["pass_at_k"]["8"] >= res["metrics"]["pass_at_k"]["1"] > 0

    adapter = tmp_path / "adapter"
    get_peft_model(load_model(tiny_path), lora_config(r=4, alpha=8)).save_pretrained(adapter)
    lora_res, lora_recs = _eval_vllm(tmp_path / "b", f"lora={adapter}")
    assert lora_res["config"]["adapter"] == str(adapter.resolve())
    assert {i: r["completions"] for i, r in lora_recs.items()} == {i: r["completions"] for i, r in recs.items()}
