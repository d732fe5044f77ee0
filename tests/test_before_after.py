"""collapse_bench.before_after's comparison: two study outputs are equal when they differ only in what records time,
the code commit or their own directories; any other difference is listed."""

import json

from collapse_bench.before_after import differences


def _side(root, wall, value, place):
    (root / "runs" / "a").mkdir(parents=True)
    (root / "runs" / "a" / "result.json").write_text(json.dumps({"identity": "x", "wall_seconds": wall, "mu": value,
                                                                  "path": [{"step": 1, "commit": place}]}))  # fmt: skip
    (root / "study.json").write_text(json.dumps({"config": {"recipe": place}, "fingerprint": None}))
    (root / "beta.md").write_text(f"# report\nmade in {place}/out\nwall time {wall} min\n| a | {value} |\n")


def test_only_volatile_keys_and_own_directories_may_differ(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    _side(old, 1.0, 0.5, "/tree/old")
    _side(new, 2.0, 0.5, "/tree/new")
    assert differences(old, new, {"/tree/old": "ROOT"}, {"/tree/new": "ROOT"}) == []
    (new / "runs" / "a" / "result.json").write_text(json.dumps({"identity": "x", "wall_seconds": 2.0, "mu": 0.6,
                                                                 "path": [{"step": 1}]}))  # fmt: skip
    (new / "beta.md").write_text("# report\nmade in /tree/new/out\nwall time 2.0 min\n| a | 0.6 |\n")
    assert differences(old, new, {"/tree/old": "ROOT"}, {"/tree/new": "ROOT"}) == ["old/runs/a/result.json",
                                                                                   "old/beta.md"]  # fmt: skip
    (new / "extra.json").write_text("{}")
    assert "old: the JSON files differ in name" in differences(old, new, {}, {})


def test_the_hash_cache_is_compared_by_its_files_hashes(tmp_path):
    """A run directory's fingerprints.json keys each model file by its tree's own path and inode: equal when the
    files' names, sizes and sha256 are; a different hash is a difference."""
    old, new = tmp_path / "old", tmp_path / "new"

    def cache(root, where, inode, sha):
        root.mkdir()
        entry = {"size": 7, "mtime_ns": inode, "ctime_ns": inode, "inode": inode, "sha256": sha}
        (root / "fingerprints.json").write_text(json.dumps({"files": {f"{where}/tiny/config.json": entry}}))

    cache(old, "/tree/old", 1, "aa")
    cache(new, "/tree/new", 2, "aa")
    assert differences(old, new, {}, {}) == []
    (new / "fingerprints.json").unlink()
    new.rmdir()
    cache(new, "/tree/new", 2, "bb")
    assert differences(old, new, {}, {}) == ["old/fingerprints.json"]
