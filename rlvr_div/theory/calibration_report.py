"""``rlvr-div calibrate``: the β ↔ validity closed forms of :mod:`rlvr_div.theory.calibration` as numbers, for one base
rate (``--base-rate`` with ``--target-validity`` or ``--beta``) or across prompts (``--from-samples``: per-prompt base
rates Â = c/n from the ``samples.jsonl`` of ``rlvr-div eval``, and the validity μ(β, Â) they imply).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr_div.errors import ConfigError
from rlvr_div.theory.calibration import (
    beta_for,
    check_beta,
    check_open_unit,
    kl_filtered_to_tilted,
    kl_tilted_to_base,
    validity_at,
)


@dataclass(frozen=True)
class PromptCounts:
    """c valid samples out of n for one prompt; Â = c/n."""

    c: int
    n: int

    @property
    def rate(self) -> float:
        return self.c / self.n


def read_counts(path: str | Path) -> list[PromptCounts]:
    """Per-prompt (c, n) from a JSONL with one line per prompt holding ``correct`` (list of booleans) or ``c``, ``n``.

    This is the ``samples.jsonl`` that ``rlvr-div eval`` writes.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--from-samples {path}: no such file; pass the samples.jsonl written by rlvr-div eval")
    out = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path} line {lineno}: not JSON ({e.msg})") from None
            if isinstance(row, dict) and isinstance(row.get("correct"), list):
                flags = row["correct"]
                if not all(isinstance(x, bool | int) and x in (0, 1) for x in flags):
                    raise ConfigError(f"{path} line {lineno}: `correct` must be a list of booleans")
                c, n = sum(bool(x) for x in flags), len(flags)
            elif isinstance(row, dict) and isinstance(row.get("c"), int) and isinstance(row.get("n"), int):
                c, n = row["c"], row["n"]
            else:
                raise ConfigError(f"{path} line {lineno}: needs `correct` (a list of booleans) or integers `c` and `n`")
            if n < 1 or not 0 <= c <= n:
                raise ConfigError(f"{path} line {lineno}: c={c}, n={n}; need n >= 1 and 0 <= c <= n")
            out.append(PromptCounts(c, n))
    if not out:
        raise ConfigError(f"{path}: no prompts in the file")
    return out


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of an ascending sequence."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (pos - lo) * (sorted_xs[hi] - sorted_xs[lo])


def implied_validity_report(counts: Sequence[PromptCounts], beta: float, bins: int = 10) -> str:
    """Text report of μ_i = μ(β, Â_i) across prompts with 0 < Â_i < 1; prompts with Â = 0 or 1 are counted apart.

    Â = 0 means no valid sample was seen: the tilt multiplies a valid output's odds by e^{1/β} but cannot create
    one the base never produces, so μ stays ≈ 0 there; Â = 1 gives μ = 1 for every β.
    """
    beta = check_beta(beta)
    zero = sum(pc.c == 0 for pc in counts)
    one = sum(pc.c == pc.n for pc in counts)
    inner = sorted(pc.rate for pc in counts if 0 < pc.c < pc.n)
    mus = sorted(validity_at(beta, a) for a in inner)
    ns = sorted(pc.n for pc in counts)
    lines = [
        f"prompts: {len(counts)}   samples per prompt: {ns[0]}" + (f"..{ns[-1]}" if ns[-1] != ns[0] else ""),
        f"base rate A (c/n): mean {sum(pc.rate for pc in counts) / len(counts):.4f}   "
        f"A = 0: {zero} prompts   A = 1: {one} prompts   0 < A < 1: {len(inner)} prompts",
        f"beta = {beta:g}   (odds multiplier e^(1/beta) = {math.exp(min(1.0 / beta, 700.0)):.4g})",
    ]
    if mus:
        qs = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
        lines.append(f"implied validity mu = sigma(logit A + 1/beta) over the {len(mus)} prompts with 0 < A < 1:")
        lines.append("  " + "  ".join(f"q{int(q * 100):02d} {_quantile(mus, q):.4f}" for q in qs))
        lines.append(f"  mean {sum(mus) / len(mus):.4f}   (their base rates: mean {sum(inner) / len(inner):.4f})")
        counts_per_bin = [0] * bins
        for mu in mus:
            counts_per_bin[min(int(mu * bins), bins - 1)] += 1
        width = max(counts_per_bin)
        lines.append("  histogram of mu:")
        for i, k in enumerate(counts_per_bin):
            bar = "#" * round(40 * k / width) if width else ""
            lines.append(f"  [{i / bins:.2f}, {(i + 1) / bins:.2f}{']' if i == bins - 1 else ')'} {k:6d} {bar}")
    else:
        lines.append("no prompt has 0 < A < 1: the tilt changes nothing measurable here")
    mean_all = (sum(mus) + one) / len(counts)  # A = 0 prompts contribute mu = 0, A = 1 prompts mu = 1
    lines.append(f"mean implied validity over all prompts (A = 0 -> 0, A = 1 -> 1): {mean_all:.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """β ↔ validity calibration of the KL-regularised optimum p_β ∝ a·e^{v/β}."""
    p = argparse.ArgumentParser(
        prog="rlvr-div calibrate",
        description=(
            "Closed forms of the tilted model p_beta = a*exp(v/beta)/Z: mu = sigma(logit A + 1/beta), "
            "KL(p_beta||a) = KL(Bern(mu)||Bern(A)), KL(p*||p_beta) = -log mu."
        ),
    )
    p.add_argument("--base-rate", type=float, help="A: the base model's validity rate on a prompt, in (0, 1)")
    p.add_argument("--target-validity", type=float, help="mu: the validity the KL-regularised optimum should have")
    p.add_argument("--beta", type=float, help="KL coefficient (with --base-rate: print mu; with --from-samples)")
    p.add_argument("--from-samples", metavar="JSONL", help="samples.jsonl of rlvr-div eval: per-prompt A = c/n")
    p.add_argument("--bins", type=int, default=10, help="histogram bins for --from-samples (default 10)")
    args = p.parse_args(argv)

    if args.from_samples is not None:
        if args.beta is None:
            raise ConfigError("--from-samples needs --beta: the KL coefficient whose implied validity to report")
        if args.bins < 1:
            raise ConfigError(f"--bins={args.bins} must be at least 1")
        print(implied_validity_report(read_counts(args.from_samples), args.beta, args.bins))
        return 0
    if args.base_rate is None:
        raise ConfigError("--base-rate is required (or use --from-samples JSONL --beta B)")
    if (args.target_validity is None) == (args.beta is None):
        raise ConfigError("give exactly one of --target-validity (to get beta) or --beta (to get the validity)")
    a = check_open_unit("--base-rate", args.base_rate)
    if args.target_validity is not None:
        beta = beta_for(args.target_validity, a)
    else:
        beta = check_beta(args.beta)
    mu = validity_at(beta, a)
    print(f"base rate A            {a:.6g}")
    print(f"validity mu            {mu:.6g}")
    print(f"beta                   {beta:.6g}   (1/beta = logit mu - logit A = {1.0 / beta:.6g})")
    print(f"KL(p_beta || a)        {kl_tilted_to_base(beta, a):.6g} nats   (the KL budget)")
    print(f"KL(p* || p_beta)       {kl_filtered_to_tilted(beta, a):.6g} nats   (= -log mu)")
    return 0
