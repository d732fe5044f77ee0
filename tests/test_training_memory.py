"""Training memory grows with tokens, not tokens × vocabulary (issue 61, item 3).

The project's per-token forward (``rlvr_div.trainers.common.chunked_token_logps``, run by
``DivergenceGRPOTrainer._get_per_token_logps_and_entropies`` for the loss, the reference and π_old) applies the LM head
to the attended completion tokens only, a chunk at a time, each chunk recomputed in backward. It must equal TRL's
fused LM head (the forward it replaces on CPU) in log-probs, entropies and gradients, and one training step on a
small model with a large vocabulary must stay under a resident-set bound that TRL's CPU kernel exceeds by far.

Measured here (2-core x86, torch 2.13 CPU, TRL 1.16; hidden 64, 2 layers, vocabulary 49,152, 32 rollouts × 64
tokens, reverse-KL term so the reference pass runs; peak resident set above the one before ``train()``): about
0.45 GB with the chunked head, about 2.3 GB with TRL's fused head (``test_trls_fused_head_exceeds_the_bound``, slow).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5  # float32: the head's matrix products over other row blocks, summed in another order
GROWTH_BOUND_MIB = 1024  # the chunked head: ~450 MiB; TRL's CPU kernel: ~2,300 MiB (module docstring)


def _model_dir(path: Path, vocab: int, head_scale: float = 1.0, seed: int = 0) -> str:
    """A random 2-layer Llama (hidden 64) of ``vocab`` tokens with the tiny base's character tokenizer, saved; its
    tied head/embedding times ``head_scale`` (1: near-uniform next-token distributions)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr_div.models.tiny_base import build_char_tokenizer

    tok = build_char_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _odd_first_token(completion_ids: list[list[int]], **kwargs: object) -> list[float]:
    """1 when a completion's first token id is odd (random tokens beyond the tokenizer's decode to nothing)."""
    return [float(ids[0] % 2) if ids else 0.0 for ids in completion_ids]


def _trainer(path: str, out: Path, peft: bool, temperature: float, **config: object):
    """The project's GRPO trainer on the model at ``path``: ``config`` on top of the small batch settings (none: a
    reverse-KL term, so a reference pass)."""
    from datasets import Dataset

    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    config = config or {"divergence": "reverse_kl", "divergence_coef": 0.04}
    args = DivergenceGRPOConfig(output_dir=str(out), per_device_train_batch_size=8, num_generations=4,
                                max_completion_length=8, temperature=temperature, bf16=False, use_cpu=True,
                                report_to="none", seed=0, activation_checkpointing=False, **config)  # fmt: skip
    peft_config = None
    if peft:
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                                 task_type="CAUSAL_LM")  # fmt: skip
    from rlvr_div.models import load_tokenizer

    data = Dataset.from_list([{"prompt": "1+2="}] * 8)
    return DivergenceGRPOTrainer(model=path, reward_funcs=[_odd_first_token], args=args, train_dataset=data,
                                 processing_class=load_tokenizer(path), peft_config=peft_config)  # fmt: skip


def _batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """6 rows [left-padded prompt | completion | right padding]: prompts of 2..5 tokens, completions of 1..7 of 7."""
    g = torch.Generator().manual_seed(3)
    prompts, completions = [2, 5, 3, 4, 5, 2], [7, 1, 4, 6, 7, 3]
    width = 5 + 7
    ids = torch.randint(1, vocab, (6, width), generator=g)
    attention = torch.zeros(6, width, dtype=torch.long)
    for r, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        attention[r, 5 - p : 5 + c] = 1
    return ids.masked_fill(attention == 0, 0), attention, 7


def _values_and_grads(model, forward, ids, attention, keep, batch_size):
    """``forward``'s (log-probs, entropies) of the rows, and the gradient of a fixed linear loss in both with respect
    to every trainable parameter of ``model``."""
    weights = torch.linspace(-1.0, 1.0, ids.size(0) * keep).view(ids.size(0), keep)
    params = [p for p in model.parameters() if p.requires_grad]
    logps, entropies, _ = forward(model, ids, attention, keep, batch_size=batch_size, compute_entropy=True)
    loss = (weights * logps).sum() + (weights.flip(0) * entropies).sum()
    return logps.detach(), entropies.detach(), torch.autograd.grad(loss, params)


def _assert_same(ours, theirs) -> None:
    """Log-probs, entropies and gradients equal to float round-off (:data:`TOL`)."""
    torch.testing.assert_close(ours[0], theirs[0], rtol=TOL, atol=TOL)
    torch.testing.assert_close(ours[1], theirs[1], rtol=TOL, atol=TOL)
    for a, b in zip(ours[2], theirs[2], strict=True):
        torch.testing.assert_close(a, b, rtol=TOL, atol=TOL * b.abs().max().item())


@pytest.mark.parametrize(
    ("peft", "temperature", "batch_size"), [(False, 1.0, None), (False, 0.7, 4), (True, 0.7, None)]
)
def test_the_chunked_forward_equals_trls_fused_head(tmp_path, monkeypatch, peft, temperature, batch_size):
    """Log-probs, entropies and the gradient of a loss in both (every trainable parameter: the tied head/embedding
    or the LoRA factors), the chunked forward against TRL's, with chunks of 5 scored tokens (several per row block)
    and without gradient (the reference's forward; under LoRA with the adapter off, as TRL runs it)."""
    from trl import GRPOTrainer

    import rlvr_div.logprobs

    vocab = 1000
    path = _model_dir(tmp_path / "model", vocab, head_scale=8.0)  # uneven distributions: entropies well below log V
    trainer = _trainer(path, tmp_path / "out", peft, temperature)
    model = trainer.model
    model.train()
    ids, attention, keep = _batch(vocab)
    monkeypatch.setattr(rlvr_div.logprobs, "LOGIT_CHUNK_BYTES", 5 * 4 * vocab)
    chunks = []  # rows of each chunk the head formed logits for (the chunked forward ran, in chunks of 5)
    head_chunk = rlvr_div.logprobs._head_chunk
    monkeypatch.setattr(rlvr_div.logprobs, "_head_chunk", lambda *a: chunks.append(len(a[2])) or head_chunk(*a))

    def run(forward):
        return _values_and_grads(model, forward, ids, attention, keep, batch_size)

    ours = run(trainer._get_per_token_logps_and_entropies)
    scored = attention[:, -keep:].bool()
    assert sum(chunks) == 2 * scored.sum() and max(chunks) == 5  # forward, and recomputed in backward
    theirs = run(lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k))
    assert ours[0].shape == theirs[0].shape == ours[1].shape == (ids.size(0), keep)
    assert (ours[0][~scored] == 0).all() and (ours[1][~scored] == 0).all()  # padding: 0, as TRL gives
    assert (ours[1][scored] > 0).all()
    _assert_same(ours, theirs)
    with torch.no_grad(), model.disable_adapter() if peft else contextlib.nullcontext():  # the reference's forward
        ref_ours = trainer._get_per_token_logps_and_entropies(model, ids, attention, keep)[0]
        ref_theirs = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, attention, keep)[0]
    torch.testing.assert_close(ref_ours, ref_theirs, rtol=TOL, atol=TOL)


def _gemma_dir(path: Path, vocab: int, seed: int = 0) -> str:
    """A random 2-layer Gemma-3 (hidden 64, one KV head, a sliding layer of window 4 then a global one) with the tiny
    base's character tokenizer, saved."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from rlvr_div.models.tiny_base import build_char_tokenizer

    tok = build_char_tokenizer()
    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=4,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
                              bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                              pad_token_id=tok.pad_token_id)  # fmt: skip
    Gemma3ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _grouped_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """9 rows, 3 prompts (of 2, 6 and 4 tokens, left-padded to 6) × 3 completions each (0..7 of 7 columns, right
    padding), the groups interleaved as a shuffled micro-batch may hold them."""
    g = torch.Generator().manual_seed(5)
    lengths = [2, 6, 4]
    prompts = [torch.randint(1, vocab, (n,), generator=g) for n in lengths]
    completions = [3, 7, 1, 5, 0, 7, 6, 4, 1]  # row 4: an empty completion
    width, keep = 6 + 7, 7
    ids = torch.zeros(9, width, dtype=torch.long)
    attention = torch.zeros(9, width, dtype=torch.long)
    for r, c in enumerate(completions):
        prompt = prompts[r % 3]
        ids[r, 6 - len(prompt) : 6] = prompt
        ids[r, 6 : 6 + c] = torch.randint(1, vocab, (c,), generator=g)
        attention[r, 6 - len(prompt) : 6 + c] = 1
    return ids, attention, keep


@pytest.mark.parametrize(("arch", "peft", "batch_size"), [("llama", False, None), ("llama", True, 6),
                                                          ("gemma3", True, None)])  # fmt: skip
def test_the_shared_prompt_forward_equals_trls_forward(tmp_path, monkeypatch, arch, peft, batch_size):
    """Rows that repeat a prompt (GRPO's groups): each distinct prompt runs once and its cache is copied to its rows
    (:func:`rlvr_div.trainers.common.shared_prompt_forward`). Log-probs, entropies and the gradient of a loss in
    both, against TRL's own forward over every row; and without gradient (the reference's forward)."""
    from trl import GRPOTrainer

    import rlvr_div.trainers.common as common

    vocab, temperature = 1000, 0.7
    path = (_gemma_dir if arch == "gemma3" else _model_dir)(tmp_path / "model", vocab)
    trainer = _trainer(path, tmp_path / "out", peft, temperature)
    model = trainer.model
    model.train()
    ids, attention, keep = _grouped_batch(vocab)
    shared = []
    forward = common.shared_prompt_forward
    monkeypatch.setattr(common, "shared_prompt_forward", lambda *a: shared.append(out := forward(*a)) or out)

    def run(forward):
        return _values_and_grads(model, forward, ids, attention, keep, batch_size)

    ours = run(trainer._get_per_token_logps_and_entropies)
    # each row block that repeats a prompt shares it (with 6 rows a block, the last 3 rows are 3 distinct prompts)
    assert [x is not None for x in shared] == ([True] if batch_size is None else [True, False])
    theirs = run(lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k))
    scored = attention[:, -keep:].bool()
    assert (ours[0][~scored] == 0).all() and (ours[1][scored] > 0).all()
    _assert_same(ours, theirs)
    with torch.no_grad(), model.disable_adapter() if peft else contextlib.nullcontext():
        ref_ours = trainer._get_per_token_logps_and_entropies(model, ids, attention, keep)[0]
        ref_theirs = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, attention, keep)[0]
    torch.testing.assert_close(ref_ours, ref_theirs, rtol=TOL, atol=TOL)


def test_share_prompt_forward_false_runs_every_rows_prompt(tmp_path, monkeypatch):
    """The config's ``share_prompt_forward: false``: the trainer's forward never shares, and gives the same values."""
    import rlvr_div.trainers.common as common

    vocab = 1000
    path = _model_dir(tmp_path / "model", vocab)
    calls = []
    forward = common.shared_prompt_forward
    monkeypatch.setattr(common, "shared_prompt_forward", lambda *a: calls.append(1) or forward(*a))
    ids, attention, keep = _grouped_batch(vocab)
    got = {}
    for share in (True, False):
        trainer = _trainer(path, tmp_path / f"out{share}", False, 1.0, share_prompt_forward=share,
                           divergence="reverse_kl", divergence_coef=0.04)  # fmt: skip
        assert trainer.share_prompt_forward is share
        with torch.no_grad():
            got[share] = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, keep)[0]
    assert len(calls) == 1  # the sharing trainer only
    torch.testing.assert_close(got[True], got[False], rtol=TOL, atol=TOL)


def test_the_shared_prompt_forward_steps_aside_where_it_would_change_the_result(tmp_path):
    """No repeated prompt, a dropout that draws masks (one shared prompt would share one mask), gradient
    checkpointing: None, and the full forward runs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlvr_div.trainers.common import has_active_dropout, shared_prompt_forward

    vocab = 1000
    model = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path / "model", vocab))
    model.train()
    ids, attention, keep = _grouped_batch(vocab)
    assert shared_prompt_forward(model, ids, attention, keep) is not None
    assert shared_prompt_forward(model, ids[:3], attention[:3], keep) is None  # three distinct prompts
    dropped = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["q_proj"]))
    assert has_active_dropout(dropped) and shared_prompt_forward(dropped, ids, attention, keep) is None
    dropped.eval()  # no masks drawn: shared again
    assert not has_active_dropout(dropped) and shared_prompt_forward(dropped, ids, attention, keep) is not None
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    plain.train()
    plain.activation_checkpointing_enable()
    assert shared_prompt_forward(plain, ids, attention, keep) is None


def test_the_shared_prompt_forward_steps_aside_where_sharing_would_differ_or_cannot_copy_the_cache(tmp_path):
    """Prefix tuning (its own tokens before the prompt), a sequence-length-dependent RoPE, a functional dropout in
    the config, and a cache with a layer that indexing by rows would not copy whole (a hybrid model's linear
    attention): None."""
    from types import SimpleNamespace

    from peft import PrefixTuningConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer

    from rlvr_div.trainers.common import has_active_dropout, rows_copyable, shared_prompt_forward

    vocab = 1000
    path = _model_dir(tmp_path / "model", vocab)
    ids, attention, keep = _grouped_batch(vocab)
    prefix = get_peft_model(AutoModelForCausalLM.from_pretrained(path),
                            PrefixTuningConfig(num_virtual_tokens=3, task_type="CAUSAL_LM"))  # fmt: skip
    prefix.train()
    assert shared_prompt_forward(prefix, ids, attention, keep) is None
    model = AutoModelForCausalLM.from_pretrained(path)
    model.train()
    rope = dict(model.config.rope_parameters)
    model.config.rope_parameters = {**rope, "rope_type": "dynamic", "factor": 2.0}
    assert shared_prompt_forward(model, ids, attention, keep) is None
    model.config.rope_parameters = rope
    assert shared_prompt_forward(model, ids, attention, keep) is not None
    model.config.hidden_dropout = 0.1
    assert has_active_dropout(model) and shared_prompt_forward(model, ids, attention, keep) is None
    model.eval()
    assert not has_active_dropout(model)
    assert rows_copyable(SimpleNamespace(layers=[DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=4)]))
    assert not rows_copyable(SimpleNamespace(layers=[DynamicLayer(), LinearAttentionLayer()]))
    assert not rows_copyable(SimpleNamespace(layers=[]))


def test_the_shared_prompt_forward_steps_aside_under_distributed_data_parallel(tmp_path):
    """A DDP-wrapped model (multi-process CPU training): its reducer expects one forward per backward, so each row's
    prompt runs (one process, gloo, on a free local port)."""
    import socket

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from rlvr_div.trainers.common import shared_prompt_forward

    vocab = 1000
    model = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path / "model", vocab))
    model.train()
    ids, attention, keep = _grouped_batch(vocab)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
        assert shared_prompt_forward(model, ids, attention, keep) is not None
        assert shared_prompt_forward(wrapped, ids, attention, keep) is None
    finally:
        dist.destroy_process_group()


def test_simkos_chunked_statistics_equal_the_full_logits(tmp_path, monkeypatch):
    """SimKO's loss-forward statistics (log-prob, entropy, top-K log-probs, top-1 flag), the head in chunks of 5
    tokens, against :func:`token_statistics` of the model's full logits, values and gradients."""
    import rlvr_div.logprobs
    from rlvr_div.trainers.simko import token_statistics

    vocab, temperature = 1000, 0.7
    path = _model_dir(tmp_path / "model", vocab, head_scale=8.0)
    trainer = _trainer(path, tmp_path / "out", False, temperature, simko=True, simko_top_k=3)
    model = trainer.model
    model.train()
    ids, attention, keep = _batch(vocab)
    monkeypatch.setattr(rlvr_div.logprobs, "LOGIT_CHUNK_BYTES", 5 * 4 * vocab)
    params = [p for p in model.parameters() if p.requires_grad]
    scored = attention[:, -keep:].bool()

    def loss_and_grads(stats):
        w = scored.float()
        loss = (w * stats.logps).sum() + (w * stats.entropies).sum() + (w.unsqueeze(-1) * stats.topk_logps).sum()
        return torch.autograd.grad(loss, params)

    ours = trainer.plugin("simko").statistics(model, ids, attention, keep, 4)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -(keep + 1) : -1] / temperature
    full = token_statistics(logits, ids[:, -keep:], 3)
    for got, ref in zip(ours, full, strict=True):
        assert got.shape == ref.shape
    torch.testing.assert_close(ours.logps[scored], full.logps[scored], rtol=TOL, atol=TOL)
    torch.testing.assert_close(ours.entropies[scored], full.entropies[scored], rtol=TOL, atol=TOL)
    torch.testing.assert_close(ours.topk_logps, full.topk_logps, rtol=TOL, atol=TOL)
    assert torch.equal(ours.is_top1, full.is_top1)
    full = full._replace(logps=full.logps * scored, entropies=full.entropies * scored)
    for a, b in zip(loss_and_grads(ours), loss_and_grads(full), strict=True):
        torch.testing.assert_close(a, b, rtol=TOL, atol=TOL * b.abs().max().item())


CHILD = r"""
import json, os, resource, sys
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[3])
from test_training_memory import _model_dir, _odd_first_token
from datasets import Dataset
from rlvr_div.models import load_tokenizer
from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer
import rlvr_div.trainers.common

if sys.argv[2] == "trl":  # TRL's fused LM head on every call (the trainers' forward before issue 61)
    rlvr_div.trainers.common.chunked_token_logps = lambda *a, **k: None
opts = json.loads(sys.argv[1])
path = _model_dir(__import__("pathlib").Path(opts["dir"]) / "model", opts["vocab"])
args = DivergenceGRPOConfig(output_dir=opts["dir"] + "/out", per_device_train_batch_size=opts["rollouts"],
    num_generations=8, max_completion_length=opts["tokens"], bf16=False, use_cpu=True, report_to="none", seed=0,
    activation_checkpointing=False, max_steps=1, save_strategy="no", logging_steps=1, disable_tqdm=True,
    divergence="reverse_kl", divergence_coef=0.04)
data = Dataset.from_list([{"prompt": f"{i % 10}+{i % 7}="} for i in range(opts["rollouts"])])
trainer = DivergenceGRPOTrainer(model=path, reward_funcs=[_odd_first_token], args=args, train_dataset=data,
                                processing_class=load_tokenizer(path))
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
before = rss_mib()
trainer.train()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
logged = trainer.state.log_history[0]
print(json.dumps({"before_mib": before, "peak_mib": peak, "growth_mib": peak - before,
                  "mean_length": logged["completions/mean_length"], "grad_norm": logged["grad_norm"]}))
"""


def training_step_memory(tmp_path: Path, forward: str, vocab: int = 49_152, rollouts: int = 32,
                         tokens: int = 64) -> dict[str, float]:  # fmt: skip
    """One ``train()`` step in a fresh process: its resident set before ``train()``, the process's peak, the
    growth between them (MiB). ``forward``: "chunked" (the project's) or "trl" (TRL's fused head everywhere)."""
    opts = {"dir": str(tmp_path), "vocab": vocab, "rollouts": rollouts, "tokens": tokens}
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(opts), forward, str(Path(__file__).parent)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


needs_proc = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc (Linux)")


@needs_proc
def test_a_training_step_with_a_large_vocabulary_stays_under_the_bound(tmp_path):
    """32 rollouts × 64 tokens on a 49,152-token vocabulary: float32 logits of the batch alone would be 0.4 GB
    (32 × 64 × 49,152 × 4 bytes), TRL's CPU kernel holds about 9 tiles of [rows × width, 32,768] in its backward;
    the chunked head stays under :data:`GROWTH_BOUND_MIB` above the resident set before the step."""
    got = training_step_memory(tmp_path, "chunked")
    assert got["mean_length"] > 0.9 * 64 and got["grad_norm"] > 0, got  # the step ran on full-length rollouts
    assert got["growth_mib"] < GROWTH_BOUND_MIB, got


@pytest.mark.slow
@needs_proc
def test_trls_fused_head_exceeds_the_bound(tmp_path):
    """The same step with TRL's fused head (the forward before issue 61): the bound above catches it."""
    got = training_step_memory(tmp_path, "trl")
    assert got["mean_length"] > 0.9 * 64 and got["grad_norm"] > 0, got
    assert got["growth_mib"] > 1.5 * GROWTH_BOUND_MIB, got
