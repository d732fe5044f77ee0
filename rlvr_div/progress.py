"""The one progress helper of rlvr_div: a tqdm bar, or a no-op when disabled (building the tiny base model,
sampling, log-probs)."""

from __future__ import annotations


class Progress:
    """A tqdm bar (or a no-op) with an optional postfix of floats, usable as a context manager.

    ``update(n, **postfix)`` advances by ``n`` and shows the postfix values (3 decimals) every 50 steps."""

    def __init__(self, total: int, desc: str, enabled: bool, mininterval: float = 1.0, leave: bool = True) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=desc, disable=not enabled, mininterval=mininterval, leave=leave)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1, **postfix: float) -> None:
        self.bar.update(n)
        if postfix and self.bar.n % 50 == 0:
            self.bar.set_postfix({k: f"{v:.3f}" for k, v in postfix.items()})

    def close(self) -> None:
        self.bar.close()
