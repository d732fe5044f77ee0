"""`rlvr-div eval --model NAME=DIR --gguf_file FILE` is `--model NAME=DIR/FILE` (as train's `--model_name_or_path DIR
--gguf_file FILE`); with several models or none it is one error line. Argument parsing only: no model loads."""

from __future__ import annotations

import pytest

from eval.cli import build_parser
from eval.runner import prepare
from eval.settings import resolve_model_ref, with_gguf_file
from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError


@pytest.fixture
def gguf_dir(tmp_path):
    d = tmp_path / "smollm2"
    d.mkdir()
    (d / "model.Q4_1.gguf").write_bytes(b"GGUF")  # only its path is read here
    return d


def _refs(argv: list[str]):
    args = build_parser().parse_args([*argv, "--output-dir", "unused"])
    return [resolve_model_ref(*m.split("=", 1)) for m in with_gguf_file(args.model, args.gguf_file)]


@pytest.mark.parametrize("flag", ["--gguf_file", "--gguf-file"])
def test_gguf_file_resolves_as_the_file_in_the_directory(gguf_dir, flag, no_model_loads, monkeypatch):
    (ref,) = _refs(["--model", f"m={gguf_dir}", flag, "model.Q4_1.gguf"])
    assert _refs(["--model", f"m={gguf_dir / 'model.Q4_1.gguf'}"]) == [ref]
    assert ref.model == str((gguf_dir / "model.Q4_1.gguf").resolve()) and ref.adapter is None
    # a relative directory, and FILE as a path of its own (train's fallback)
    monkeypatch.chdir(gguf_dir.parent)
    (relative,) = _refs(["--model", "m=smollm2", "--gguf_file", "model.Q4_1.gguf"])
    assert _refs(["--model", "m=smollm2/model.Q4_1.gguf"]) == [relative] and relative.model == ref.model
    assert _refs(["--model", "m=smollm2", "--gguf_file", str(gguf_dir / "model.Q4_1.gguf")])[0].model == ref.model


def test_prepare_gets_the_same_model_as_with_the_file_path(gguf_dir, tmp_path, no_model_loads):
    by_flag = with_gguf_file([f"m={gguf_dir}"], "model.Q4_1.gguf")
    assert by_flag == [f"m={gguf_dir / 'model.Q4_1.gguf'}"]
    job = prepare(by_flag, task="arith", output_dir=tmp_path / "out", device="cpu", limit=2, n=2)
    assert job.settings["m"].model == str((gguf_dir / "model.Q4_1.gguf").resolve())
    assert with_gguf_file(["m=tiny", "b=tiny"], None) == ["m=tiny", "b=tiny"]  # without the flag: unchanged


@pytest.mark.parametrize(
    "models, gguf_file, message",
    [
        (["a=DIR", "b=DIR"], "model.Q4_1.gguf", "names the GGUF file of one --model, but there are 2 --model options"),
        ([], "model.Q4_1.gguf", "but there are no --model"),
        (["a=DIR"], "absent.gguf", "gguf_file 'absent.gguf' not found in"),
        (["a=DIR"], "model.bin", "does not end in .gguf"),
        (["a=DIR/model.Q4_1.gguf"], "model.Q4_1.gguf", "is a GGUF file already"),
        (["a=tiny"], "model.Q4_1.gguf", "a built-in tiny base"),
    ],
)
def test_ambiguous_or_wrong_gguf_file_is_one_line(gguf_dir, models, gguf_file, message, no_model_loads):
    models = [m.replace("DIR", str(gguf_dir)) for m in models]
    with pytest.raises(ConfigError, match=message) as info:
        with_gguf_file(models, gguf_file)
    assert "\n" not in str(info.value)


def test_the_cli_refuses_gguf_file_with_several_models_in_one_line(gguf_dir, tmp_path, capsys, no_model_loads):
    argv = ["eval", "--model", f"a={gguf_dir}", "--model", "b=tiny", "--gguf_file", "model.Q4_1.gguf"]
    assert cli_main([*argv, "--task", "arith", "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gguf_file names the GGUF file of one --model" in err[0], err
