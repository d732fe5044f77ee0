"""pyproject.toml: the license is an SPDX string (a `license` table makes setuptools warn on every install), the
build requires a setuptools that reads it, and every extra that an error message tells users to install exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from rlvr_div.recipe.checks import BACKENDS

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_license_is_an_spdx_string_and_the_build_reads_it():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    assert int(re.search(r">=\s*(\d+)", setuptools).group(1)) >= 77  # PEP 639 license strings: setuptools 77


def test_extras_named_in_messages_exist():
    extras = PYPROJECT["project"]["optional-dependencies"]
    named = {m for _, install in BACKENDS.values() for m in re.findall(r"\.\[(\w+)\]", install)}
    assert named == {"tensorboard", "wandb"} and named <= set(extras)
    assert any(d.startswith("tensorboard") for d in extras["tensorboard"])
    assert any(d.startswith("wandb") for d in extras["wandb"])


def test_the_shipped_tiny_bases_are_package_data():
    """Every file of every shipped tiny base is matched by the package-data patterns, so a wheel carries them."""
    import fnmatch

    from rlvr_div.models.tiny_base import SHIPPED_DIR

    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["rlvr_div"]
    package = SHIPPED_DIR.parent
    files = [p.relative_to(package).as_posix() for p in SHIPPED_DIR.rglob("*") if p.is_file()]
    assert "tiny_bases/manifest.json" in files and len(files) > 5
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []
