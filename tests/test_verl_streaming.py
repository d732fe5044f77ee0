"""A verl dump is streamed (issue 60, item 3): read whole (bytes, split lines and every line's parsed object at
once), a 100k-line dump of 15 MB peaked at 140 MB (docs/evaluation.md, its command). Now the reader holds one line at
a time beyond what it returns (the completions of the step read), and a dump's earlier steps are never held."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from eval.sample_formats import read_sample_file

LINES = 10_000


def _dump(path: Path, steps: tuple[int, ...] = (10,)) -> int:
    """``LINES`` lines per step: 500 prompts x 20 samples, about 117 bytes a line; the file's size."""
    with open(path, "w") as f:
        for step in steps:
            for i in range(LINES):
                p = i // 20
                line = {"input": f"Problem {p}: compute {p} + {p + 1}. Answer:", "output": f" It is {2 * p + i % 3}.",
                        "gts": str(2 * p + 1), "score": float(i % 3 == 1), "step": step}  # fmt: skip
                f.write(json.dumps(line) + "\n")
    return path.stat().st_size


def _read(path: Path) -> tuple[object, int, int]:
    """The file read, the memory it kept and the peak while reading (tracemalloc: Python's own allocations)."""
    tracemalloc.start()
    try:
        sample_file = read_sample_file(str(path))
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return sample_file, kept, peak


def test_a_verl_dump_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    size = _dump(tmp_path / "verl.jsonl")
    sample_file, kept, peak = _read(tmp_path / "verl.jsonl")
    assert len(sample_file.problems) == 500 and sum(len(p.completions) for p in sample_file.problems) == LINES
    # streamed, the peak is what is kept plus a line
    assert peak - kept < size / 10, (size, kept, peak)
    assert peak < 2 * size, (size, kept, peak)


def test_the_earlier_steps_of_concatenated_dumps_are_not_held(tmp_path: Path) -> None:
    size = _dump(tmp_path / "verl.jsonl", steps=(30, 10, 20))
    sample_file, kept, peak = _read(tmp_path / "verl.jsonl")
    assert sample_file.step == 30 and sample_file.steps == [10, 20, 30]
    assert sum(len(p.completions) for p in sample_file.problems) == LINES
    assert peak < size, (size, kept, peak)  # a third of the file is read into memory, not all three steps
