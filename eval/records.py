"""Per-problem sample records on disk: ``samples.jsonl`` (one JSON line per scored problem) and atomic JSON files.

The runner appends records as problems are scored; the report and the collapse benchmark read them back. A record
holds index, prompt, completions, extracted answers, scores, ``correct`` (score == 1), c, n, token counts and the
problem's diversity numbers (see :func:`eval.scoring.score_completions`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError

SAMPLES_FILE = "samples.jsonl"
RESULTS_FILE = "results.json"


def read_samples(path: Path, n: int | None = None) -> dict[int, dict[str, Any]]:
    """The finished problems of a ``samples.jsonl`` by index. A last line without its newline (a write cut by a
    kill) is removed from the file; a bad complete line is a :class:`ConfigError`."""
    if not path.is_file():
        return {}
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
    records: dict[int, dict[str, Any]] = {}
    for lineno, line in enumerate(data[:end].decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"{path}:{lineno} is not valid JSON; delete the line or the file to resample") from None
        if n is not None and rec.get("n") != n:
            raise ConfigError(f"{path}:{lineno} has n={rec.get('n')} samples, expected {n}")
        records[int(rec["index"])] = rec
    return records


def append_line(f: Any, record: dict[str, Any]) -> None:
    """Append one record as a JSON line, flushed and fsync'd (a kill loses at most the line being written)."""
    f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    f.flush()
    os.fsync(f.fileno())


def write_json(path: Path, obj: Any) -> None:
    """Write atomically (temporary file, fsync, rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_records(out_dir: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The records of a model directory's ``samples.jsonl``, by index (the first ``limit`` indices if given)."""
    recs = read_samples(out_dir / SAMPLES_FILE)
    return [recs[i] for i in sorted(recs) if limit is None or i < limit]
