"""DPH-RL: the offline stage (split, stored samples, resume after SIGKILL), the hybrid trainer (no reference
forward), the forward-KL rehearsal gradient, and one-line errors for bad rehearsal sets."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pytest
import torch
from launchers import TWO_PROCESSES, processes_of

from rlvr_div.cli import main as cli_main
from rlvr_div.divergences import token_divergence
from rlvr_div.trainers.dph import Rehearsal

ROOT = Path(__file__).resolve().parents[1]
RECIPE = str(ROOT / "recipes/tiny/dph_forward_kl.yaml")


def _rehearse(out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlvr_div.cli", "rehearse", "--config", RECIPE, "--rehearsal_path", str(out),
           "--task_size", "24", *extra]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def rehearsal_dir(tmp_path_factory, tiny_path) -> Path:
    out = tmp_path_factory.mktemp("dph") / "rehearsal"
    proc = _rehearse(out)
    _, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    return out


def test_offline_stage_writes_both_splits_and_summary(rehearsal_dir):
    summary = json.loads((rehearsal_dir / "summary.json").read_text())
    lines = [json.loads(x) for x in (rehearsal_dir / "samples.jsonl").read_text().splitlines()]
    assert summary["n_prompts"] == 24 == len(lines)
    pef = [r for r in lines if r["c"] >= summary["threshold"]]
    assert summary["n_pef"] == len(pef) and summary["n_exp"] == 24 - len(pef)
    assert sum(summary["pass_rate_histogram"].values()) == 24
    d_exp = datasets.load_from_disk(str(rehearsal_dir / "d_exp"))
    assert len(d_exp) == summary["n_exp"] and "target" in d_exp.column_names
    reh = datasets.load_from_disk(str(rehearsal_dir / "rehearsal"))
    assert len(reh) == summary["n_rehearsal"] == sum(r["extra"]["correct"] for r in pef)
    for row in reh:
        assert len(row["ref_logps"]) == len(row["completion_ids"]) and all(lp <= 0 for lp in row["ref_logps"])


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_killed_offline_stage_resumes_to_the_same_result(rehearsal_dir, tmp_path):
    out = tmp_path / "killed"
    proc = _rehearse(out, "--rehearsal_sampling_batch_size", "9")  # one prompt per generate call
    log = out / "samples.jsonl"
    deadline = time.time() + 120
    while (not log.exists() or len(log.read_text().splitlines()) < 3) and proc.poll() is None:
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "summary.json").exists()
    proc = _rehearse(out, "--rehearsal_sampling_batch_size", "9")
    _, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    a = json.loads((rehearsal_dir / "summary.json").read_text())
    b = json.loads((out / "summary.json").read_text())
    for key in ("n_pef", "n_exp", "n_rehearsal", "pass_rate_histogram"):
        assert a[key] == b[key]


def test_hybrid_trainer_runs_no_reference_forward(rehearsal_dir, tmp_path, tiny_path):
    from rlvr_div.recipe import parse_recipe
    from rlvr_div.train import build_trainer

    script, training, model = parse_recipe(
        ["--config", RECIPE, "--rehearsal_path", str(rehearsal_dir), "--output_dir", str(tmp_path),
         "--max_steps", "2", "--per_device_train_batch_size", "32", "--save_strategy", "no", "--disable_tqdm", "true"]
    )  # fmt: skip
    trainer = build_trainer(script, training, model)
    assert trainer.ref_model is None and trainer.beta == 0.0
    grad_forwards, keys = [], []
    per_token = trainer._get_per_token_logps_and_entropies  # one call per log-prob forward of a batch (the model
    # itself may run twice in one: each distinct prompt once, then the rows)

    def counted(*args, **kwargs):
        grad_forwards.append(torch.is_grad_enabled())
        return per_token(*args, **kwargs)

    trainer._get_per_token_logps_and_entropies = counted
    generate = trainer._generate_and_score_completions

    def spy(inputs):
        out = generate(inputs)
        keys.append(set(out))
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    assert keys and all("ref_per_token_logps" not in k for k in keys)
    # per optimizer step: one forward with gradients (rehearsal rows folded into the policy-loss forward), nothing else
    assert grad_forwards == [True, True]
    assert len(trainer.state.log_history[0]) and "rehearsal/forward_kl" in trainer.state.log_history[0]


def test_forward_kl_rehearsal_gradient_is_the_nll_gradient_in_expectation():
    """On samples y ~ π_ref, E[∇(u − log u − 1)] = −E[∇ log π(y)] (the NLL gradient), since E_ref[u∇log π] = 0."""
    g = torch.Generator().manual_seed(0)
    logits, ref_logits = (
        torch.randn(12, generator=g, dtype=torch.float64),
        torch.randn(12, generator=g, dtype=torch.float64),
    )
    ref_logp = torch.log_softmax(ref_logits, -1)
    y = torch.multinomial(ref_logp.exp(), 200_000, replacement=True, generator=g)
    grads_f = []
    for chunk in y.chunk(40):
        theta = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(theta, -1)
        f = token_divergence("forward_kl", logp[chunk], ref_logp[chunk], source="reference").mean()
        grads_f.append(torch.autograd.grad(f, theta)[0])
    theta = logits.clone().requires_grad_(True)
    exact_nll = -(ref_logp.exp() * torch.log_softmax(theta, -1)).sum()
    nll_grad = torch.autograd.grad(exact_nll, theta)[0]
    stack = torch.stack(grads_f)
    mean, se = stack.mean(0), stack.std(0) / math.sqrt(len(grads_f))
    assert ((mean - nll_grad).abs() <= 4 * se + 1e-6).all()


@pytest.mark.parametrize(
    "mutate, message",
    [
        ("missing", "does not exist"),
        ("model", "was sampled from"),
        ("tokenizer", "another tokenizer"),
        ("empty", "is empty"),
        ("temperature", "differs from the rehearsal set's sampling temperature"),
        ("threshold", "rehearsal_threshold=5 differs from the rehearsal set's threshold = 6"),
        ("top_p", "rehearsal_top_p=0.9 differs from the rehearsal set's top_p = 1.0"),
    ],
)
def test_bad_rehearsal_sets_fail_in_one_line(mutate, message, rehearsal_dir, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad"
    shutil.copytree(rehearsal_dir, bad)
    summary = json.loads((bad / "summary.json").read_text())
    extra: list[str] = []
    if mutate == "missing":
        shutil.rmtree(bad)
    elif mutate == "model":
        summary["model"] = "some/other-model"
    elif mutate == "tokenizer":
        summary["tokenizer_hash"] = "0" * 16
    elif mutate == "empty":
        summary["n_rehearsal"] = 0
    elif mutate == "temperature":
        extra = ["--temperature", "0.7"]
    elif mutate == "threshold":  # the set was built by the recipe's offline stage: k 8, threshold 6, top_p 1.0
        extra = ["--rehearsal_threshold", "5"]
    elif mutate == "top_p":
        extra = ["--rehearsal_top_p", "0.9"]
    if bad.exists():
        (bad / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", lambda *a, **k: pytest.fail("loaded"))
    rc = cli_main(
        ["train", "--config", RECIPE, "--rehearsal_path", str(bad), "--output_dir", str(tmp_path / "o"), *extra]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err


def _train_dph(recipe: str, rehearsal: Path, out: Path, steps: int, *extra: str, processes: int = 1) -> list[dict]:
    launcher = TWO_PROCESSES if processes == 2 else [sys.executable]
    cmd = launcher + ["-m", "rlvr_div.train", "--config", str(ROOT / f"recipes/tiny/{recipe}.yaml"),
                      "--rehearsal_path", str(rehearsal), "--output_dir", str(out), "--max_steps", str(steps),
                      "--disable_tqdm", "true", "--save_strategy", "no", *extra]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert processes_of(out) == processes
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_two_process_dph_run_shards_the_rehearsal_batch(rehearsal_dir, tmp_path, tiny_path):
    logs = _train_dph("dph_forward_kl", rehearsal_dir, tmp_path / "ddp", 2, "--per_device_train_batch_size", "16",
                      processes=2)  # fmt: skip
    assert [x["step"] for x in logs] == [1, 2]
    assert all(math.isfinite(x["rehearsal/forward_kl"]) and x["rehearsal/nll"] > 0 for x in logs)


@pytest.fixture(scope="module")
def full_rehearsal_dir(tmp_path_factory, tiny_path) -> Path:
    """The recipe's own offline stage, on every `pairsum` training prompt."""
    out = tmp_path_factory.mktemp("dph_full") / "rehearsal"
    res = subprocess.run([sys.executable, "-m", "rlvr_div.cli", "rehearse", "--config", RECIPE, "--rehearsal_path",
                          str(out)], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["dph_forward_kl", "dph_js"])
@pytest.mark.parametrize("mode", ["full", "lora", "two_processes"])
def test_tiny_dph_recipes_train_50_steps(recipe, mode, full_rehearsal_dir, tmp_path, tiny_path):
    extra = ["--use_peft", "true", "--lora_target_modules", "all-linear"] if mode == "lora" else []
    processes = 2 if mode == "two_processes" else 1
    if processes == 2:
        extra += ["--per_device_train_batch_size", "64"]  # the recipe's 128 rollouts per step over two processes
    logs = _train_dph(recipe, full_rehearsal_dir, tmp_path / mode, 50, *extra, processes=processes)
    name = recipe.removeprefix("dph_")
    assert [x["step"] for x in logs] == list(range(1, 51))
    assert all(math.isfinite(x[f"rehearsal/{name}"]) and math.isfinite(x["loss"]) for x in logs)


def _gpt2_like(tokenizer):
    """A tiny GPT-2 (learned absolute position embeddings), random weights, built from a config (no hub)."""
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        model.transformer.wpe.weight.mul_(50.0)  # make positions matter as much as tokens
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


def _random_rows(g: torch.Generator, count: int, lengths: tuple[int, int], vocab: int) -> list[list[int]]:
    return [
        torch.randint(4, vocab, (int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g)),), generator=g)
        .tolist()
        for _ in range(count)
    ]  # fmt: skip


def _trl_layout(prompts: list[list[int]], completions: list[list[int]], pad: int) -> dict[str, torch.Tensor]:
    """TRL's policy-row layout: left-padded prompts | right-padded completions."""
    p_len, c_len = max(map(len, prompts)), max(map(len, completions))
    ids = torch.full((len(prompts), p_len + c_len), pad, dtype=torch.long)
    mask, completion_mask = torch.zeros_like(ids), torch.zeros((len(prompts), c_len))
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, p_len - len(p) : p_len + len(c)] = torch.tensor(p + c)
        mask[i, p_len - len(p) : p_len + len(c)] = 1
        completion_mask[i, : len(c)] = 1
    return {"input_ids": ids, "attention_mask": mask, "completion_mask": completion_mask}


@pytest.mark.parametrize(
    "architecture, precision",
    [("llama_rotary", "fp32"), ("gpt2_absolute", "fp32"), ("llama_rotary", "bf16"), ("gpt2_absolute", "bf16")],
)
def test_folded_rehearsal_rows_keep_every_row_at_its_own_positions(architecture, precision, tmp_path, tiny_path):
    """Folding must not move any token: the policy rows score exactly as in TRL's own forward (their layout, their
    positions, bit for bit also under bf16 autocast, so the PPO ratio picks up no noise from folding), and the
    rehearsal rows as in a forward of their own and as the stored reference log-probs (`token_logprobs`), so the
    forward-KL term of an untrained policy is 0 (in bf16 up to kernel round-off). Rehearsal prompts both longer and
    shorter than the policy's, completions both longer and shorter; a rotary model and a GPT-2-style model with
    learned absolute positions."""
    from contextlib import nullcontext

    from rlvr_div.logprobs import token_logprobs
    from rlvr_div.models import load_model, load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.dph.rehearsal_set import RehearsalSamples
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    bf16 = precision == "bf16"
    tok = load_tokenizer(tiny_path)
    model = load_model(tiny_path) if architecture == "llama_rotary" else _gpt2_like(tok)
    args = DivergenceGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=8, max_completion_length=8,
        use_cpu=True, bf16=bf16, report_to="none", activation_checkpointing=False,
    )  # fmt: skip
    trainer = DivergenceGRPOTrainer(
        model=model, reward_funcs=[get_reward("pair_sum")], args=args, train_dataset=get_task("pairsum", size=8),
        processing_class=tok,
    )  # fmt: skip
    trainer.model.eval()
    g = torch.Generator().manual_seed(1)
    vocab = len(tok)
    prompts, completions = _random_rows(g, 6, (3, 20), vocab), _random_rows(g, 6, (1, 12), vocab)
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():  # as the offline stage does
        ref = token_logprobs(trainer.model, prompts, completions, pad_token_id=tok.pad_token_id)
    samples = RehearsalSamples(prompts, completions, ref, tok.pad_token_id)
    dph = Rehearsal(trainer, samples)  # the DPH-RL plug-in on these samples
    trainer.plugins.append(dph)
    rehearsal = samples.batch(0, 6, 0, 1)
    # policy rows in TRL's layout: left-padded prompts (6..10 tokens) | right-padded completions (4..8 tokens)
    policy = _trl_layout(_random_rows(g, 5, (6, 10), vocab), _random_rows(g, 5, (4, 8), vocab), tok.pad_token_id)
    ids, mask, width = policy["input_ids"], policy["attention_mask"], policy["completion_mask"].size(1)
    with torch.no_grad():
        alone, entropy_alone, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, width, compute_entropy=True
        )
        dph._pending = rehearsal
        folded, entropy_folded, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, width, compute_entropy=True
        )
        separate = dph._separate_forward(trainer.model, rehearsal)
    on, r_on = policy["completion_mask"].bool(), rehearsal["completion_mask"].bool()
    assert folded.shape == alone.shape
    policy_tol = 0.0 if bf16 else 1e-5  # bf16: bit-identical (before the fix: 0.094 rotary, 0.317 GPT-2)
    assert (folded - alone)[on].abs().max() <= policy_tol and (entropy_folded - entropy_alone)[on].abs().max() <= 1e-5
    got = dph._logps
    assert got.shape == rehearsal["completion_mask"].shape
    if bf16:  # rehearsal rows: batch shapes other than token_logprobs's, so up to bf16 round-off (measured 1.9e-6)
        assert (got - rehearsal["ref_logps"])[r_on].abs().max() < 1e-3
        return
    assert (got - separate)[r_on].abs().max() < 1e-5
    assert (got - rehearsal["ref_logps"])[r_on].abs().max() < 1e-5
    trainer.current_gradient_accumulation_steps = 1
    assert abs(dph._term(got, rehearsal).item()) < 1e-6  # forward KL at initialisation


def _rehearse_in_process(out: Path, *extra: str) -> dict:
    from rlvr_div.rehearse import main as rehearse_main

    argv = ["--config", RECIPE, "--rehearsal_path", str(out), "--task_size", "12", *extra]
    assert rehearse_main(argv) == 0
    return json.loads((out / "summary.json").read_text())


def test_offline_stage_judges_correctness_with_the_validity_reward(tmp_path, tiny_path, monkeypatch):
    """With rewards [math_format, pair_sum] and validity_reward_index 1, "correct" is pair_sum's verdict (the first
    reward, a format check that no pairsum answer passes, must not decide the split). The verdicts differ on a
    correct answer, and the base need not sample one: the first sample of every prompt is replaced, as the sampler
    hands it over, by a correct one, ``<target>+0``, which pair_sum passes and math_format fails."""
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.dph import offline as rehearsal

    verifier, first = get_reward("pair_sum"), get_reward("math_format")
    data = get_task("pairsum", split="train", seed=0).select(range(12))
    planted = {i: f"{row['target']}+0" for i, row in enumerate(data)}
    texts = list(planted.values())
    assert verifier.score(texts, target=list(data["target"])) == [1.0] * 12, "premise: the planted answers pass"
    assert first.score(texts) == [0.0] * 12, "premise: the first reward fails the planted answers"

    class Planting:
        """The offline stage's sampler, with each prompt's first sample replaced by its planted answer."""

        def __init__(self, sampler):
            self.sampler = sampler

        def sample(self, *args, **kwargs):
            tokenizer = self.sampler.tokenizer
            for item in self.sampler.sample(*args, **kwargs):
                item.completions[0] = planted[item.index]
                item.completion_ids[0] = [*tokenizer.encode(planted[item.index], add_special_tokens=False),
                                          tokenizer.eos_token_id]  # fmt: skip
                yield item

    sampler = rehearsal._sampler
    monkeypatch.setattr(rehearsal, "_sampler", lambda *a, **k: Planting(sampler(*a, **k)))
    summary = _rehearse_in_process(
        tmp_path / "r", "--rewards", "math_format", "pair_sum", "--validity_reward_index", "1"
    )
    tasks = {r["index"]: r for r in map(json.loads, (tmp_path / "r" / "samples.jsonl").read_text().splitlines())}
    assert sorted(tasks) == list(range(12)) and all(tasks[i]["completions"][0] == planted[i] for i in tasks)
    correct = 0
    for index, rec in tasks.items():
        scores = verifier.score(rec["completions"], target=[data[index]["target"]] * len(rec["completions"]))
        assert rec["correct"] == [s == 1.0 for s in scores]
        correct += sum(rec["correct"])
    assert correct >= 12 and summary["validity_reward"] == "pair_sum"


def test_offline_stage_loads_the_model_with_the_recipe_settings(tmp_path, tiny_path, monkeypatch):
    """The offline stage loads the base with the recipe's dtype and model settings, on the training device, and
    records them; its reference log-probs are those of that model."""
    import rlvr_div.models as models

    loaded = []
    original = models.load_model

    def spy(*args, **kwargs):
        model = original(*args, **kwargs)
        loaded.append((kwargs, model))
        return model

    monkeypatch.setattr(models, "load_model", spy)
    summary = _rehearse_in_process(tmp_path / "r", "--dtype", "bfloat16", "--attn_implementation", "eager")
    assert len(loaded) == 1
    kwargs, model = loaded[0]
    assert model.dtype == torch.bfloat16 and model.config._attn_implementation == "eager"
    assert str(kwargs["device"]) == "cpu"  # use_cpu: true in the recipe (a GPU run gets cuda)
    assert summary["dtype"] == "bfloat16" and summary["backend"] == "hf" and summary["device"] == "cpu"


def test_offline_stage_samples_with_vllm_when_the_recipe_uses_vllm(tmp_path, tiny_path, monkeypatch):
    """`use_vllm: true` samples through rlvr_div.sampling's vLLM backend with the recipe's engine settings (here a
    stand-in that records them and samples with HF; `make test-vllm` runs the real engine)."""
    import rlvr_div.sampling as sampling
    from rlvr_div.models import load_model, load_tokenizer

    engines = []

    class StandIn:
        def __init__(self, model_path, tokenizer, config, **kwargs):
            engines.append(kwargs)
            self._hf = sampling.HFSampler(load_model(model_path), tokenizer, config)

        def sample(self, *args, **kwargs):
            return self._hf.sample(*args, **kwargs)

    monkeypatch.setattr(sampling, "vllm_available", lambda: True)
    monkeypatch.setattr(sampling, "VLLMSampler", StandIn)
    summary = _rehearse_in_process(
        tmp_path / "r", "--use_vllm", "true", "--vllm_gpu_memory_utilization", "0.5", "--vllm_max_model_length", "64"
    )
    assert summary["backend"] == "vllm" and len(engines) == 1
    engine = engines[0]
    assert engine["dtype"] == "float32" and engine["gpu_memory_utilization"] == 0.5 and engine["max_model_len"] == 64
    assert load_tokenizer(tiny_path)  # the stored set is still checked against the model's tokenizer
    reh = datasets.load_from_disk(str(tmp_path / "r" / "rehearsal"))
    assert len(reh) == summary["n_rehearsal"]


def test_offline_stage_without_vllm_installed_fails_in_one_line(tmp_path, capsys, no_model_loads, monkeypatch):
    monkeypatch.setattr("rlvr_div.sampling.vllm_available", lambda: False)
    rc = cli_main(["rehearse", "--config", RECIPE, "--rehearsal_path", str(tmp_path / "r"), "--use_vllm", "true"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "vllm" in err[0], err


@pytest.mark.parametrize(
    "change, message",
    [
        ({"temperature": 0.7}, "differs from the rehearsal set's sampling temperature"),
        ({"rehearsal_path": "missing"}, "does not exist"),
        ({"rehearsal_k": 16}, "rehearsal_k=16 differs from the rehearsal set's k = 8"),
    ],
)
def test_trainer_api_checks_the_rehearsal_set_before_the_model_loads(change, message, rehearsal_dir, tmp_path,
                                                                     tiny_path, monkeypatch):  # fmt: skip
    """A Python user who builds DivergenceGRPOTrainer directly gets the CLI's rehearsal-set checks, before loading."""
    from rlvr_div.errors import ConfigError
    from rlvr_div.models import load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    settings = {"temperature": 1.0, "rehearsal_path": str(rehearsal_dir), **change}
    if settings["rehearsal_path"] == "missing":
        settings["rehearsal_path"] = str(tmp_path / "missing")
    args = DivergenceGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=8, max_completion_length=8,
        use_cpu=True, bf16=False, report_to="none", **settings,
    )  # fmt: skip
    tokenizer = load_tokenizer(tiny_path)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", lambda *a, **k: pytest.fail("loaded"))
    monkeypatch.setattr("transformers.LlamaForCausalLM.from_pretrained", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(ConfigError, match=message):
        DivergenceGRPOTrainer(
            model=tiny_path, reward_funcs=[get_reward("pair_sum")], args=args,
            train_dataset=get_task("pairsum", size=8),
            processing_class=tokenizer,
        )  # fmt: skip


def test_offline_stage_keys_left_unset_at_train_are_the_sets(rehearsal_dir):
    """Training decides nothing of the offline stage: unset keys take the stored set's values, given ones must match
    it (the set was built with k 8, threshold 6, top_p 1.0 by the recipe)."""
    from types import SimpleNamespace

    from rlvr_div.errors import ConfigError
    from rlvr_div.trainers.dph import given_offline_stage, offline_stage
    from rlvr_div.trainers.dph.rehearsal_set import check_rehearsal

    unset = SimpleNamespace(rehearsal_k=None, rehearsal_threshold=None, rehearsal_top_p=None, rehearsal_keep=None)
    assert given_offline_stage(unset) == {}
    assert offline_stage(unset) == {"k": 8, "threshold": 8, "top_p": 1.0, "keep": "fresh"}
    assert check_rehearsal(rehearsal_dir, stage=given_offline_stage(unset))["threshold"] == 6
    same = SimpleNamespace(rehearsal_k=8, rehearsal_threshold=6, rehearsal_top_p=1.0, rehearsal_keep="fresh")
    check_rehearsal(rehearsal_dir, stage=given_offline_stage(same))  # a set recording no rule kept the fresh sample
    with pytest.raises(ConfigError, match="rehearsal_k=4 differs"):
        check_rehearsal(rehearsal_dir, stage=given_offline_stage(SimpleNamespace(**{**vars(same), "rehearsal_k": 4})))
    with pytest.raises(ConfigError, match="rehearsal_keep=any_correct differs from the rehearsal set's keep = fresh"):
        other = SimpleNamespace(**{**vars(same), "rehearsal_keep": "any_correct"})
        check_rehearsal(rehearsal_dir, stage=given_offline_stage(other))


def test_any_correct_keeps_one_sample_for_every_d_pef_prompt(rehearsal_dir, tmp_path):
    """``rehearsal_keep: any_correct`` on the fixture's samples (copied, so nothing is sampled again): every D_pef
    prompt keeps a sample, the fresh one where it is correct and else the first correct of the k; the rule is
    recorded, and a training recipe that asks for the other rule is refused."""
    from types import SimpleNamespace

    from rlvr_div.errors import ConfigError
    from rlvr_div.trainers.dph import given_offline_stage
    from rlvr_div.trainers.dph.rehearsal_set import check_rehearsal

    out = tmp_path / "any_correct"
    out.mkdir()
    shutil.copy(rehearsal_dir / "samples.jsonl", out / "samples.jsonl")
    proc = _rehearse(out, "--rehearsal_keep", "any_correct")
    _, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    fresh = json.loads((rehearsal_dir / "summary.json").read_text())
    assert summary["keep"] == "any_correct" and "keep" not in fresh
    assert summary["n_rehearsal"] == summary["n_pef"] == fresh["n_pef"] > fresh["n_rehearsal"]
    records = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    expected = []
    for r in records:
        if r["c"] >= summary["threshold"]:
            first = r["correct"].index(True)
            expected.append(r["extra"]["completion_ids"] if r["extra"]["correct"] else r["completion_ids"][first])
    reh = datasets.load_from_disk(str(out / "rehearsal"))
    assert [list(row["completion_ids"]) for row in reh] == expected
    with pytest.raises(ConfigError, match="rehearsal_keep=fresh differs"):
        fresh_rule = SimpleNamespace(rehearsal_k=None, rehearsal_threshold=None, rehearsal_top_p=None,
                                     rehearsal_keep="fresh")  # fmt: skip
        check_rehearsal(out, stage=given_offline_stage(fresh_rule))


def test_any_correct_sample_is_a_draw_from_the_filtered_model():
    """The kept sample of :func:`kept_sample` under ``any_correct`` is distributed as a(·|correct): simulated i.i.d.
    draws from a known a over 3 correct and 2 incorrect answers, 20,000 D_pef prompts (at least 2 of 4 correct); the
    kept answers' frequencies are within 0.015 of a*(y) = a(y)/A (their standard error is ≤ 0.0036)."""
    import random

    from rlvr_div.trainers.dph.offline import kept_sample

    a = {"c1": 0.05, "c2": 0.1, "c3": 0.15, "w1": 0.3, "w2": 0.4}
    correct_mass = a["c1"] + a["c2"] + a["c3"]
    rng = random.Random(0)
    counts = dict.fromkeys(("c1", "c2", "c3"), 0)
    kept_n = 0
    while kept_n < 20_000:
        draws = rng.choices(list(a), weights=list(a.values()), k=5)
        ok = [d.startswith("c") for d in draws]
        if sum(ok[:4]) < 2:
            continue
        record = {"completions": draws[:4], "completion_ids": [[i] for i in range(4)], "correct": ok[:4],
                  "extra": {"completion": draws[4], "completion_ids": [4], "correct": ok[4]}}  # fmt: skip
        assert kept_sample(record, "fresh") == (record["extra"] if ok[4] else None)
        sample = kept_sample(record, "any_correct")
        assert sample is not None and sample["completion"].startswith("c")
        counts[sample["completion"]] += 1
        kept_n += 1
    for answer, n in counts.items():
        assert abs(n / kept_n - a[answer] / correct_mass) < 0.015, (answer, n / kept_n)


def test_trainer_api_refuses_a_rehearsal_set_of_another_tokenizer(rehearsal_dir, tmp_path, tiny_path):
    from transformers import AutoTokenizer

    from rlvr_div.errors import ConfigError
    from rlvr_div.models.tiny_base import build_char_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    other = build_char_tokenizer("0123456789+-=: ")
    other.save_pretrained(tmp_path / "tok")
    args = DivergenceGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=8, max_completion_length=8,
        use_cpu=True, bf16=False, report_to="none", rehearsal_path=str(rehearsal_dir),
    )  # fmt: skip
    with pytest.raises(ConfigError, match="another tokenizer"):
        DivergenceGRPOTrainer(
            model=tiny_path, reward_funcs=[get_reward("pair_sum")], args=args,
            train_dataset=get_task("pairsum", size=8),
            processing_class=AutoTokenizer.from_pretrained(tmp_path / "tok"),
        )  # fmt: skip


def test_forward_kl_on_filtered_rehearsal_samples_preserves_the_base_on_the_correct_set():
    """DPH-RL stores only *correct* samples of D_pef prompts, y ~ p* = a(·|correct). On those, E_{p*}[u − log u − 1]
    (u = π/a) is not the NLL: its gradient is 0 at π = a, and its minimiser keeps π(y) = a(y) on the correct set (so
    π(correct) = a(correct) = A) and leaves the wrong answers' mass free, where the NLL of the same samples drives
    π(correct) to 1. Exact expectations over a 12-outcome world."""
    g = torch.Generator().manual_seed(0)
    log_a = torch.randn(12, generator=g, dtype=torch.float64).log_softmax(0)
    correct = torch.zeros(12, dtype=torch.bool)
    correct[:5] = True
    big_a = log_a[correct].exp().sum()
    p_star = torch.where(correct, log_a.exp() / big_a, torch.zeros(12, dtype=torch.float64))

    def forward_kl(theta):
        logp = torch.log_softmax(theta, 0)
        return (p_star * token_divergence("forward_kl", logp, log_a, source="reference")).sum()

    def nll(theta):
        return -(p_star * torch.log_softmax(theta, 0)).sum()

    theta = log_a.clone().requires_grad_(True)
    assert torch.autograd.grad(forward_kl(theta), theta)[0].abs().max() < 1e-12  # no pull at all at π = a
    assert torch.autograd.grad(nll(theta), theta)[0].abs().max() > 0.05

    def minimise(loss):
        theta = (log_a + 0.3 * torch.randn(12, generator=g, dtype=torch.float64)).requires_grad_(True)
        opt = torch.optim.LBFGS([theta], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15)

        def closure():
            opt.zero_grad()
            value = loss(theta)
            value.backward()
            return value

        opt.step(closure)
        return torch.softmax(theta.detach(), 0)

    pi = minimise(forward_kl)
    assert torch.allclose(pi[correct], log_a[correct].exp(), atol=1e-6)  # π = a on the correct answers
    assert pi[correct].sum().item() == pytest.approx(big_a.item(), abs=1e-6)  # π(correct) = A, not 1
    assert minimise(nll)[correct].sum().item() > 0.999
