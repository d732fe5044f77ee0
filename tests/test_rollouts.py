"""Training rollouts through the project's decoding loop (``rollout_sampler: rlvr_div``, rlvr_div.trainers.rollouts):
each distinct prompt read once (every row's while a dropout draws masks), the model's own distribution, TRL's
completion layout and seeding, and one-line refusals of what the loop would not honour."""

from __future__ import annotations

import pytest
import torch
from train_checks import make_trainer, trainer_config  # shared helpers (tests/ is on sys.path)

from rlvr_div.errors import ConfigError

# the tiny base's pairsum prompts are short: two distinct prompts of 8 rows each, as GRPO lays out its rollouts
GROUP = 8


def _trainer(tiny_path, tmp_path, peft_dropout: float | None = None, **config):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    args = trainer_config(DivergenceGRPOConfig, tmp_path, rollout_sampler="rlvr_div", **config)
    if peft_dropout is None:
        return make_trainer(DivergenceGRPOTrainer, args, tiny_path)
    from peft import LoraConfig

    from rlvr_div.models import load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task

    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=peft_dropout, target_modules=["q_proj", "v_proj"],
                      task_type="CAUSAL_LM")  # fmt: skip
    return DivergenceGRPOTrainer(model=tiny_path, reward_funcs=[get_reward("pair_sum")], args=args,
                                 train_dataset=get_task("pairsum", size=16), processing_class=load_tokenizer(tiny_path),
                                 peft_config=lora)  # fmt: skip


def _prompt_ids(trainer) -> list[list[int]]:
    """Two prompts of the training set, each repeated over a group of :data:`GROUP` rows (TRL's layout)."""
    tok = trainer.processing_class
    prompts = [trainer.train_dataset[i]["prompt"] for i in (0, 1)]
    ids = [tok(text=p)["input_ids"] for p in prompts]
    assert ids[0] != ids[1]
    return [ids[g] for g in (0, 1) for _ in range(GROUP)]


def _first_forward_shapes(trainer, prompt_ids):
    """The rows' completions, and the (rows, width) of every forward the model ran while sampling them."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda m, a, k: shapes.append(tuple((k.get("input_ids") if "input_ids" in k else a[0]).shape)),
        with_kwargs=True,
    )
    try:
        ids, logprobs = trainer._generate_single_turn(prompt_ids, None, {}, GROUP)
    finally:
        hook.remove()
    assert logprobs is None  # as TRL's generate path: no sampling log-probs
    return ids, shapes


def test_rollouts_read_each_distinct_prompt_once_and_end_as_trls(tiny_path, tmp_path):
    trainer = _trainer(tiny_path, tmp_path)
    trainer.model.train()
    prompt_ids = _prompt_ids(trainer)
    torch.manual_seed(0)
    ids, shapes = _first_forward_shapes(trainer, prompt_ids)
    assert shapes[0] == (2, max(len(p) for p in prompt_ids))  # the two distinct prompts, once
    assert all(s[1] == 1 for s in shapes[1:])  # then one token per step
    assert len(ids) == len(prompt_ids)
    eos, limit = set(trainer.eos_token_ids), trainer.args.max_completion_length
    for row in ids:
        assert 1 <= len(row) <= limit
        assert not eos & set(row[:-1])  # nothing after the first end token
        assert row[-1] in eos or len(row) == limit  # ended on one (kept), or at the length limit


def test_rollouts_read_every_rows_prompt_while_dropout_draws_masks(tiny_path, tmp_path):
    trainer = _trainer(tiny_path, tmp_path, peft_dropout=0.1)
    trainer.model.train()
    prompt_ids = _prompt_ids(trainer)
    _, shapes = _first_forward_shapes(trainer, prompt_ids)
    assert shapes[0] == (len(prompt_ids), max(len(p) for p in prompt_ids))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_tokens_are_draws_of_the_training_models_distribution(tiny_path, tmp_path, temperature):
    """The loop's log-probabilities of the tokens it drew, on the trainer's LoRA model in training mode, equal the
    model's teacher-forced ones at the same temperature: its cache, positions and padding give the model's own
    next-token distributions (the inverse-CDF draw itself: tests/test_sampling.py)."""
    from rlvr_div.logprobs import token_logprobs
    from rlvr_div.sampling import decode

    trainer = _trainer(tiny_path, tmp_path, peft_dropout=0.0, temperature=temperature)
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.train()
    prompt_ids = _prompt_ids(trainer)
    prompts, rows = [prompt_ids[0], prompt_ids[GROUP]], [r // GROUP for r in range(len(prompt_ids))]
    uniforms = torch.rand((len(rows), trainer.args.max_completion_length), generator=torch.Generator().manual_seed(3))
    ids, got = decode(model, prompts, rows, uniforms, temperature, 1.0, list(trainer.eos_token_ids),
                      trainer.processing_class.pad_token_id, record=True)  # fmt: skip
    with torch.no_grad():
        want = token_logprobs(model, prompt_ids, ids, temperature=temperature,
                              pad_token_id=trainer.processing_class.pad_token_id)  # fmt: skip
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-5)


def test_rollouts_follow_the_global_seed(tiny_path, tmp_path):
    """A call's uniforms come from one draw of torch's global generator (the Trainer's seed, restored on resume)."""
    trainer = _trainer(tiny_path, tmp_path)
    prompt_ids = _prompt_ids(trainer)
    draws = {}
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        draws.setdefault(seed, []).append(trainer._generate_single_turn(prompt_ids, None, {}, GROUP)[0])
    assert draws[1][0] == draws[1][1]
    assert draws[2][0] != draws[1][0]


def test_training_samples_through_the_loop(tiny_path, tmp_path, monkeypatch):
    """Two training steps sample every rollout through the loop, never through TRL's generate."""
    from trl import GRPOTrainer

    def trls(*a, **k):
        raise AssertionError("TRL's _generate_single_turn ran")

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", trls)
    trainer = _trainer(tiny_path, tmp_path, max_steps=2, divergence="forward_kl", divergence_coef=0.05)
    calls = []
    generate = trainer.rollouts.generate
    monkeypatch.setattr(trainer.rollouts, "generate", lambda ids: calls.append(len(ids)) or generate(ids))
    trainer.train()
    assert calls == [16, 16]
    assert [x["step"] for x in trainer.state.log_history if "loss" in x] == [1, 2]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"rollout_sampler": "vllm"}, "unknown rollout_sampler 'vllm'"),
        ({"top_k": 5}, "top_k=5"),
        ({"min_p": 0.1}, "min_p=0.1"),
        ({"repetition_penalty": 1.1}, "repetition_penalty=1.1"),
        ({"generation_kwargs": {"top_k": 3}}, "generation_kwargs="),
        ({"cache_implementation": "static"}, "cache_implementation='static'"),
        ({"top_k": None}, "top_k=None"),
        ({"temperature": 0.0}, "temperature=0.0"),
        ({"max_completion_length": None}, "max_completion_length=None"),
        ({"use_transformers_continuous_batching": True}, "use_transformers_continuous_batching=True"),
    ],
)
def test_config_refuses_what_the_loop_would_not_honour(tmp_path, setting, message):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig

    with pytest.raises(ConfigError, match=message) as e:
        trainer_config(DivergenceGRPOConfig, tmp_path, **{"rollout_sampler": "rlvr_div", **setting})
    assert "\n" not in str(e.value)
    if "rollout_sampler" not in setting:  # TRL's generate honours it
        trainer_config(DivergenceGRPOConfig, tmp_path, **setting)


def test_generation_overrides_fill_trls_unset_fields_from_the_models():
    from types import SimpleNamespace

    from rlvr_div.trainers.rollouts import generation_overrides

    trl = SimpleNamespace(min_p=None, typical_p=None, no_repeat_ngram_size=None, suppress_tokens=None, num_beams=None)
    neutral = SimpleNamespace(typical_p=1.0, num_beams=1, suppress_tokens=[], no_repeat_ngram_size=0)
    assert generation_overrides(trl, neutral) == []
    assert generation_overrides(trl, None) == []
    model = SimpleNamespace(min_p=0.05, no_repeat_ngram_size=3, suppress_tokens=[7])
    assert generation_overrides(trl, model) == ["min_p=0.05", "suppress_tokens=[7]", "no_repeat_ngram_size=3"]
    assert generation_overrides(SimpleNamespace(min_p=0.1), model)[0] == "min_p=0.1"  # TRL's own value first


def test_trainer_refuses_a_model_the_loop_cannot_sample(tiny_path, tmp_path, monkeypatch):
    """peft prompt learning, a rollout_func, a model generation config that generate would apply, and a cache that
    indexing by rows would not copy whole, each in one line."""
    from peft import PrefixTuningConfig

    from rlvr_div.models import load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers import rollouts
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    args = trainer_config(DivergenceGRPOConfig, tmp_path, rollout_sampler="rlvr_div")
    with pytest.raises(ConfigError, match="prompt learning"):
        DivergenceGRPOTrainer(model=tiny_path, reward_funcs=[get_reward("pair_sum")], args=args,
                              train_dataset=get_task("pairsum", size=16), processing_class=load_tokenizer(tiny_path),
                              peft_config=PrefixTuningConfig(num_virtual_tokens=2, task_type="CAUSAL_LM"))  # fmt: skip
    with pytest.raises(ConfigError, match="rollout_func"):
        DivergenceGRPOTrainer(model=tiny_path, reward_funcs=[get_reward("pair_sum")], args=args,
                              train_dataset=get_task("pairsum", size=16), processing_class=load_tokenizer(tiny_path),
                              rollout_func=lambda prompts, trainer: {})  # fmt: skip
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    model.generation_config.no_repeat_ngram_size = 3  # the model's own: generate would apply it
    with pytest.raises(ConfigError, match="no_repeat_ngram_size=3"):
        DivergenceGRPOTrainer(model=model, reward_funcs=[get_reward("pair_sum")], args=args,
                              train_dataset=get_task("pairsum", size=16),
                              processing_class=load_tokenizer(tiny_path))  # fmt: skip
    monkeypatch.setattr(rollouts, "rows_copyable", lambda cache: False)
    with pytest.raises(ConfigError, match="copied by rows"):
        make_trainer(DivergenceGRPOTrainer, args, tiny_path)
