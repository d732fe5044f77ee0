"""docs/evaluation.md's "Adding a sample format": the snippet, run as written against eval.sample_formats, makes a new
format readable by ``rlvr-div eval --samples`` with nothing else changed (detection, key checks, scoring)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import eval.sample_formats as sample_formats
from rlvr_div.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def howto_format(monkeypatch):
    """The documented snippet, executed in eval.sample_formats' namespace, on a copy of the registry."""
    monkeypatch.setattr(sample_formats.SAMPLE_FORMATS, "_items", dict(sample_formats.SAMPLE_FORMATS._items))
    text = (ROOT / "docs" / "evaluation.md").read_text()
    section = text.split("### Adding a sample format", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(snippet, "docs/evaluation.md", "exec"), dict(vars(sample_formats)))  # noqa: S102
    return sample_formats.SAMPLE_FORMATS.get("responses")


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_documented_format_is_detected_and_read(howto_format, tmp_path):
    path = _write(tmp_path / "r.jsonl", [{"question": "1+2=", "responses": ["3", "4"], "answer": "3"},
                                         {"question": "2+2=", "responses": ["4"], "answer": "4"}])  # fmt: skip
    read = sample_formats.read_sample_file(str(path))
    assert read.format == "responses"
    assert [(p.index, p.completions, p.gold) for p in read.problems] == [(0, ["3", "4"], "3"), (1, ["4"], "4")]


def test_a_line_without_its_keys_is_one_line(howto_format, tmp_path):
    path = _write(tmp_path / "r.jsonl", [{"question": "1+2=", "responses": ["3"]}, {"question": "2+2="}])
    with pytest.raises(sample_formats.ConfigError, match=r"r.jsonl:2 has no 'responses'; every line of this "
                       r"responses sample file needs question, responses"):  # fmt: skip
        sample_formats.read_sample_file(str(path))


def test_the_documented_format_is_scored_by_eval(howto_format, tmp_path):
    path = _write(tmp_path / "r.jsonl", [{"question": "1+2=", "responses": ["3", "4"], "answer": "3"},
                                         {"question": "2+2=", "responses": ["5", "1"], "answer": "4"}])  # fmt: skip
    out = tmp_path / "out"
    argv = ["eval", "--samples", f"x={path}", "--reward", "arith_exact", "--quiet", "--output-dir", str(out)]
    assert cli_main(argv) == 0
    results = json.loads((out / "x" / "results.json").read_text())
    assert results["config"]["scored_from"]["format"] == "responses"
    assert results["metrics"]["pass_at_k"]["1"] == pytest.approx(0.25)  # (1/2 + 0/2) / 2
