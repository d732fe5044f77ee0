"""`rlvr-div` makes torch's waiting OpenMP threads sleep instead of spin (rlvr_div/cpu_threads.py) unless the user
chose a wait policy: beside another busy process, spinning threads slowed a tiny training step 3.1-3.9x
(bench/bench_threads.py)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = "import os, sys\nfrom rlvr_div.cli import main\nmain(['list'])\nprint(os.environ.get('OMP_WAIT_POLICY'))\n"


def _policy_seen(env_policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | {"PYTHONPATH": str(ROOT)}
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_the_cli_sets_a_passive_wait_policy_unless_the_user_chose_one():
    assert _policy_seen(None) == "PASSIVE"
    assert _policy_seen("ACTIVE") == "ACTIVE"


def test_the_policy_is_reported_as_too_late_once_torch_is_loaded(monkeypatch):
    import torch  # noqa: F401 - loaded, as in this test process

    from rlvr_div.cpu_threads import prefer_passive_waiting

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert prefer_passive_waiting() is False and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
