"""Score-only input that used to end in a traceback (issue 36): each is one `error:` line naming the file and line,
and nothing is left behind; a UTF-8 byte-order mark is accepted."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main

GOOD = {"prompt": "1+1=", "completion": "2", "answer": "2"}


def _lines(*objs: dict) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objs).encode()


def _refused(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> str:
    out = tmp_path / "out"
    rc = cli_main(["eval", "--samples", f"x={path}", "--reward", "arith_exact", "--quiet", "--output-dir", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: --samples x: {path}:"), err
    assert not (out / "x").exists() or not any((out / "x").iterdir())  # nothing written, no samples.jsonl.tmp
    return err[0]


def test_a_byte_that_is_not_utf8_names_its_line(tmp_path, capsys, no_model_loads):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(_lines(GOOD) + b'{"prompt": "caf\xe9", "completion": "2", "answer": "2"}\n')
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:2 " in line and "not UTF-8" in line and "0xe9" in line


def test_a_lone_surrogate_in_a_completion_names_its_line_and_leaves_no_tmp_file(tmp_path, capsys, no_model_loads):
    path = tmp_path / "surrogate.jsonl"
    path.write_bytes(_lines(GOOD, GOOD) + b'{"prompt": "2+2=", "completion": "4\\ud800", "answer": "4"}\n')
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:3 " in line and "surrogate" in line and "\\ud800" in line
    # a valid pair (an emoji, as ensure_ascii JSON writes it) is text like any other
    path.write_bytes(_lines(GOOD, {"prompt": "2+2=", "completion": "4 \U0001f600", "answer": "4"}))
    assert b"\\ud83d\\ude00" in path.read_bytes()
    rc = cli_main(["eval", "--samples", f"x={path}", "--reward", "arith_exact", "--quiet", "--output-dir",
                   str(tmp_path / "ok")])  # fmt: skip
    assert rc == 0
    assert "4 \U0001f600" in (tmp_path / "ok" / "x" / "samples.jsonl").read_text(encoding="utf-8")


def test_a_failure_while_writing_leaves_no_tmp_file(tmp_path, monkeypatch, no_model_loads):
    """Whatever stops the scoring part-way, samples.jsonl.tmp goes with it (and an earlier samples.jsonl stays)."""
    import eval.score_only as score_only

    path = tmp_path / "s.jsonl"
    path.write_bytes(_lines(GOOD, {**GOOD, "prompt": "2+2=", "answer": "4"}))
    out = tmp_path / "out"
    args = ["eval", "--samples", f"x={path}", "--reward", "arith_exact", "--quiet", "--output-dir", str(out)]
    assert cli_main(args) == 0
    before = (out / "x" / "samples.jsonl").read_bytes()
    calls = []

    def fail_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(*a, **k)

    real = score_only.score_completions
    monkeypatch.setattr(score_only, "score_completions", fail_second)
    with pytest.raises(OSError, match="disk full"):
        cli_main(args)
    assert not (out / "x" / "samples.jsonl.tmp").exists()
    assert (out / "x" / "samples.jsonl").read_bytes() == before


def test_an_lm_eval_line_without_doc_id_names_its_line(tmp_path, capsys, no_model_loads):
    first = {"doc_id": 0, "doc": {"answer": "2"}, "target": "2", "arguments": [["1+1=", {}]], "resps": [["2"]]}
    second = {k: v for k, v in first.items() if k != "doc_id"}
    path = tmp_path / "lm.jsonl"
    path.write_bytes(_lines(first, second))
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:2" in line and "doc_id" in line
    path.write_bytes(_lines(first, {**first, "doc_id": 1, "resps": None}))
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:2" in line and "resps" in line


@pytest.mark.parametrize("index", ["abc", -1, 1.5, True, None])
def test_an_index_that_is_not_a_whole_number_from_0_names_its_line(index, tmp_path, capsys, no_model_loads):
    path = tmp_path / "plain.jsonl"
    path.write_bytes(_lines({**GOOD, "index": 0}, {**GOOD, "index": index}))
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:2" in line and f"index {index!r}" in line and "whole number >= 0" in line
    ours = {"index": index, "prompt": "1+1=", "completions": ["2"], "columns": {"answer": "2"}}
    path.write_bytes(_lines(ours))
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:1" in line and f"index {index!r}" in line
    lm = {"doc_id": index, "doc": {"answer": "2"}, "target": "2", "arguments": [["1+1=", {}]], "resps": [["2"]]}
    path.write_bytes(_lines(lm))
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:1" in line and f"doc_id {index!r}" in line


def test_a_repeated_index_names_both_lines(tmp_path, capsys, no_model_loads):
    ours = {"index": 3, "prompt": "1+1=", "completions": ["2"], "columns": {"answer": "2"}}
    path = tmp_path / "ours.jsonl"
    path.write_bytes(_lines(ours, {**ours, "index": 4}, ours))
    line = _refused(path, tmp_path, capsys)
    assert f"{path}:3" in line and "index 3" in line and "line 1" in line


def test_a_utf8_byte_order_mark_is_accepted(tmp_path, capsys, no_model_loads):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + _lines(GOOD, {**GOOD, "completion": "3"}))
    out = tmp_path / "out"
    args = ["eval", "--samples", f"x={path}", "--reward", "arith_exact", "--quiet", "--output-dir", str(out)]
    assert cli_main(args) == 0
    results = json.loads((out / "x" / "results.json").read_text())
    assert results["metrics"]["pass_at_k"]["1"] == 0.5
    # our own samples.jsonl and the results.json beside it, both with a mark (written by a Windows editor)
    for name in ("samples.jsonl", "results.json"):
        f = out / "x" / name
        f.write_bytes(codecs.BOM_UTF8 + f.read_bytes())
    again = tmp_path / "again"
    assert cli_main(["eval", "--samples", f"x={out / 'x'}", "--reward", "arith_exact", "--quiet", "--output-dir",
                     str(again)]) == 0  # fmt: skip
    assert json.loads((again / "x" / "results.json").read_text())["metrics"]["pass_at_k"]["1"] == 0.5


def test_a_results_file_that_is_not_json_names_its_line(tmp_path, capsys, no_model_loads):
    path = tmp_path / "s.jsonl"
    path.write_bytes(_lines(GOOD))
    out = tmp_path / "out"
    assert cli_main(["eval", "--samples", f"x={path}", "--reward", "arith_exact", "--quiet", "--output-dir",
                     str(out)]) == 0  # fmt: skip
    (out / "x" / "results.json").write_text('{\n  "config": {,\n}\n')
    rc = cli_main(["eval", "--samples", f"y={out / 'x'}", "--reward", "arith_exact", "--quiet", "--output-dir",
                   str(tmp_path / "o2")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"{out / 'x' / 'results.json'}:2" in err[0], err
