"""A study's worker processes (collapse_bench.engine.init_worker) end when the study that started them is killed: a
killed `rlvr-div beta-study` or `rlvr-div collapse` leaves no worker training beside whatever runs next."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from collapse_bench.engine import init_worker

def work(path):
    open(path, "w").write(str(os.getpid()))
    time.sleep(120)

if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=init_worker, initargs=(1,))
    pool.submit(work, sys.argv[1])
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_worker_ends_when_its_study_is_killed(tmp_path):
    script, pid_file = tmp_path / "study.py", tmp_path / "worker.pid"
    script.write_text(STUDY)
    study = subprocess.Popen([sys.executable, str(script), str(pid_file)], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        deadline = time.time() + 120
        while not (pid_file.is_file() and pid_file.read_text()) and time.time() < deadline:
            time.sleep(0.2)
        worker = int(pid_file.read_text())
        assert _alive(worker)
        study.send_signal(signal.SIGKILL)
        study.wait()
        deadline = time.time() + 20
        while _alive(worker) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "the worker outlived its study"
    finally:
        study.kill()
        if pid_file.is_file() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # a failed run of this test leaves no worker
