"""pass@k evaluation: does RL fine-tuning collapse a model's coverage compared with its base?

- ``eval.estimators``: unbiased pass@k, cover@τ, maj@k, bootstrap standard errors;
- ``eval.diversity``: distinct correct answers/completions, answer entropy, problems lost versus the base;
- ``eval.settings``: what an evaluation depends on (model references, sampling, device, dtype, backend) and its checks;
- ``eval.resume``: whether an output directory's samples may be resumed (settings and model fingerprint);
- ``eval.scoring``: one problem's completions → its ``samples.jsonl`` record (sampled or read from a log);
- ``eval.metrics``: pass@k, cover@τ, maj@k, diversity, answer/length rates and the comparison with the base;
- ``eval.sample_formats``: sample logs made elsewhere (lm-eval, verl, plain JSONL, ours) read back; lm-eval's written;
- ``eval.score_only``: ``--samples``: scoring a sample log without a model;
- ``eval.runner``: orchestration: validate everything, sample (resumable) or score, compare, report;
- ``eval.report``: ``report.md`` and plots across models;
- ``eval.cli``: ``rlvr-div eval`` / ``python -m eval``.
"""
