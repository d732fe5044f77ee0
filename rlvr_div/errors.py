"""The one error type for bad user input.

Raised before any model loads; ``rlvr-div`` prints ``error: <message>`` on one line and exits with code 2.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


class ConfigError(ValueError):
    """Bad user input (recipe key, name, value or path). The message is one line naming the bad item."""


@contextlib.contextmanager
def relative_path_hint(path: str | None) -> Iterator[None]:
    """A :class:`ConfigError` about a relative ``path`` that does not exist says where it was looked up."""
    try:
        yield
    except ConfigError as e:
        relative = path and not os.path.isabs(os.path.expanduser(path)) and not os.path.exists(path)
        if relative and path in str(e):
            raise ConfigError(f"{e} (relative paths are read from the current directory, {os.getcwd()})") from None
        raise
