"""Where the project keeps what it builds (the tiny base, GGUF dequantisations, synthetic SQL databases): below every
package that writes there, so none of them imports another for it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where built artefacts live: ``$RLVR_DIV_CACHE`` or ``~/.cache/rlvr_div``."""
    return Path(os.environ.get("RLVR_DIV_CACHE", Path.home() / ".cache" / "rlvr_div")).expanduser()
