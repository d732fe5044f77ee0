"""The one error type for bad user input.

Raised before any model loads; ``rlvr-div`` prints ``error: <message>`` on one line and exits with code 2.
"""


class ConfigError(ValueError):
    """Bad user input (recipe key, name, value or path). The message is one line naming the bad item."""
