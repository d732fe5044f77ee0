"""``rlvr-div rehearse --config recipe.yaml [--key value ...]``: the DPH-RL offline stage of a DPH recipe, as a command
(the stage itself: :mod:`rlvr_div.trainers.dph.offline`)."""

from __future__ import annotations

import sys

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.dph.offline import build_rehearsal_set


def main(argv: list[str] | None = None) -> int:
    """``rlvr-div rehearse --config recipe.yaml [--key value ...]``: the DPH-RL offline stage of a DPH recipe."""
    import logging

    from rlvr_div.recipe import parse_recipe, validate

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    script, training, model_args = parse_recipe(argv)
    if getattr(training, "rehearsal_path", None) is None:
        raise ConfigError("the recipe has no rehearsal_path (use `trainer: divergence` with `rehearsal_path: DIR`)")
    validate(script, training, model_args, check_inputs=False)
    if training.use_vllm:
        from rlvr_div.sampling import vllm_available

        if not vllm_available():
            raise ConfigError("use_vllm: true needs the vllm package (pip install 'rlvr-div[vllm]'), or use_vllm false")
        if script.gguf_file:
            raise ConfigError("the offline stage cannot serve gguf_file with vLLM; set use_vllm false")
    summary = build_rehearsal_set(script, training, model_args)
    keys = ("n_prompts", "n_pef", "n_exp", "n_rehearsal")
    print(" ".join(f"{k}={summary[k]}" for k in keys), f"-> {training.rehearsal_path}")
    if summary["n_rehearsal"] == 0:
        print("warning: the rehearsal set is empty (no D_pef prompt kept a correct extra sample)", file=sys.stderr)
    return 0
