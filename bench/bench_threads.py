"""Speed of a CPU job alone against beside one other busy process, for torch thread settings.

Each measurement is a fresh worker process that runs a workload for ``--seconds`` wall-clock seconds (after a
warm-up) and counts iterations; iterations/s alone divided by iterations/s beside a competitor is the slowdown.

Workloads, both at the shape of the tiny bases (``TinySpec``: hidden 128, 2 layers, 4 heads):
- ``train``: one AdamW step of next-token cross-entropy on a batch of 128 sequences of 24 tokens (a base build's
  or a trainer's backward step);
- ``generate``: one ``model.generate`` of 64 rows × 16 new tokens, sampled (a rollout).

Thread settings: ``default`` (torch's own thread count, OpenMP's own wait policy), ``passive`` (torch's thread
count with ``OMP_WAIT_POLICY=PASSIVE``: waiting OpenMP threads sleep instead of spinning), ``brief`` (torch's
thread count with ``GOMP_SPINCOUNT=10000``: GNU OpenMP's threads spin 10,000 rounds, not 300,000, before they
sleep) and ``one`` (one torch thread). Competitors: ``none``, ``spin`` (one pure-Python busy loop: any other
single-core job) and ``same`` (a second copy of the same workload under the same setting: two of our jobs side by
side).

    .venv/bin/python bench/bench_threads.py [--seconds 12] [--workloads train generate]
        [--settings default passive brief one] [--json bench/results/threads/threads.json] [--smoke]

Run it on an otherwise idle machine: the point is the ratio, measured side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {
    "default": ({}, None),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, None),
    "brief": ({"GOMP_SPINCOUNT": "10000"}, None),
    "one": ({}, 1),
}
COMPETITORS = ("none", "spin", "same")
SPIN = "while True:\n    pass\n"


def run_workload(workload: str, seconds: float, threads: int | None, forever: bool = False) -> dict:
    """Iterations of ``workload`` in ``seconds`` wall-clock seconds after a 2-iteration warm-up (inside a worker)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr_div.models.tiny_base import TinySpec

    if threads is not None:
        torch.set_num_threads(threads)
    spec = TinySpec()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_positions,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(3, 32, (spec.batch_size, 24))
    prompts = torch.randint(3, 32, (64, 8))

    def step() -> None:
        if workload == "train":
            loss = model(input_ids=batch, labels=batch).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        else:
            with torch.inference_mode():
                model.generate(input_ids=prompts, do_sample=True, top_k=0, max_new_tokens=16, min_new_tokens=16,
                               pad_token_id=0, eos_token_id=2)  # fmt: skip

    for _ in range(2):
        step()
    if forever:
        while True:
            step()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    elapsed = time.perf_counter() - start
    return {"iterations": n, "seconds": elapsed, "per_second": n / elapsed, "threads": torch.get_num_threads()}


def _worker_cmd(workload: str, seconds: float, setting: str, forever: bool = False) -> tuple[list[str], dict]:
    env_extra, threads = SETTINGS[setting]
    cmd = [sys.executable, __file__, "--worker", workload, "--seconds", str(seconds)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    if forever:
        cmd.append("--forever")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    env.update(env_extra)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return cmd, env


def measure(workload: str, setting: str, competitor: str, seconds: float, head_start: float = 4.0) -> dict:
    """One measurement: the workload under ``setting`` in a fresh process, beside ``competitor`` (started first)."""
    rival = None
    if competitor == "spin":
        rival = subprocess.Popen([sys.executable, "-c", SPIN])
    elif competitor == "same":
        cmd, env = _worker_cmd(workload, seconds, setting, forever=True)
        rival = subprocess.Popen(cmd, env=env)
    try:
        if rival is not None:
            time.sleep(head_start)  # the competitor past its imports and warm-up
        cmd, env = _worker_cmd(workload, seconds, setting)
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        if rival is not None:
            rival.kill()
            rival.wait()
    return {"workload": workload, "setting": setting, "competitor": competitor, **result}


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def table(rows: list[dict]) -> str:
    """Markdown: per workload and setting, iterations/s alone and beside each competitor, and the slowdowns."""
    lines = [
        "| workload | setting | threads | alone (it/s) | beside spin (it/s) | beside same (it/s) | slowdown spin "
        "| slowdown same |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keyed = {(r["workload"], r["setting"], r["competitor"]): r for r in rows}
    for workload, setting in dict.fromkeys((r["workload"], r["setting"]) for r in rows):
        alone = keyed[(workload, setting, "none")]["per_second"]
        spin = keyed[(workload, setting, "spin")]["per_second"]
        same = keyed[(workload, setting, "same")]["per_second"]
        threads = keyed[(workload, setting, "none")]["threads"]
        lines.append(f"| {workload} | {setting} | {threads} | {alone:.2f} | {spin:.2f} | {same:.2f} | "
                     f"{alone / spin:.2f}× | {alone / same:.2f}× |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", choices=("train", "generate"), help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    p.add_argument("--forever", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=12.0, help="measured wall-clock seconds per measurement")
    p.add_argument("--workloads", nargs="+", default=["train", "generate"], choices=("train", "generate"))
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--json", type=Path, help="write every measurement here")
    p.add_argument("--smoke", action="store_true", help="one workload, one setting, 0.2 s: a check that it runs")
    args = p.parse_args(argv)
    head_start = 4.0
    if args.smoke:
        args.seconds, args.workloads, args.settings, head_start = 0.2, ["generate"], ["one"], 0.5
    if args.worker:
        print(json.dumps(run_workload(args.worker, args.seconds, args.threads, forever=args.forever)), flush=True)
        return
    rows = []
    for workload in args.workloads:
        for setting in args.settings:
            for competitor in COMPETITORS:
                rows.append(measure(workload, setting, competitor, args.seconds, head_start))
                r = rows[-1]
                print(f"{workload:8s} {setting:8s} beside {competitor:4s}: {r['per_second']:.2f} it/s", flush=True)
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {"command": " ".join(sys.argv), "cpus": os.cpu_count(), "seconds": args.seconds,
                "torch": _version("torch"), "transformers": _version("transformers")}  # fmt: skip
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
