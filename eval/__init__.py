"""pass@k evaluation: does RL fine-tuning collapse a model's coverage compared with its base?

- ``eval.estimators``: unbiased pass@k, cover@τ, maj@k, bootstrap standard errors;
- ``eval.diversity``: distinct correct answers/completions, answer entropy, problems lost versus the base;
- ``eval.runner``: resumable sampling and scoring (``samples.jsonl``) and metrics (``results.json``);
- ``eval.report``: ``report.md`` and plots across models;
- ``eval.cli``: ``rlvr-div eval`` / ``python -m eval``.
"""
