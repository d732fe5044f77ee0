"""The Hugging Face Hub, asked before any model loads: whether it may be contacted, and whether a model reference that
is not a local path names a model there (the local cache first, then one metadata request with a short timeout and no
retries)."""

from __future__ import annotations

from rlvr_div.errors import ConfigError

HUB_TIMEOUT_S = 10.0


def hub_offline() -> bool:
    """Whether the Hugging Face Hub must not be contacted (``HF_HUB_OFFLINE``, read as huggingface_hub reads it)."""
    from huggingface_hub import constants

    return bool(constants.is_offline_mode()) if hasattr(constants, "is_offline_mode") else constants.HF_HUB_OFFLINE


def hub_error(e: BaseException) -> str:
    """A short name for a failed hub request (the exception's first line, without the URL noise)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:120]}" if text else type(e).__name__


def check_hub_model(repo_id: str, revision: str | None = None, filename: str = "config.json") -> None:
    """A model reference that is not a local path must be a model on the Hugging Face Hub.

    Found in the local cache: accepted without a request. Otherwise, with ``HF_HUB_OFFLINE`` set: refused; online:
    one metadata request (``HfApi.model_info``, timeout :data:`HUB_TIMEOUT_S`, no retries) decides.
    """
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        cached = try_to_load_from_cache(repo_id, filename, revision=revision)
    except (HFValidationError, ValueError):
        raise ConfigError(
            f"model {repo_id!r} is neither a local path nor a valid Hugging Face Hub id (org/name)"
        ) from None
    if isinstance(cached, str):
        return
    if hub_offline():
        raise ConfigError(
            f"model {repo_id!r} is not a local path and not in the Hugging Face cache, and HF_HUB_OFFLINE is set: "
            "download it first, pass a local directory, or unset HF_HUB_OFFLINE"
        )
    try:
        HfApi().model_info(repo_id, revision=revision, timeout=HUB_TIMEOUT_S)
    except RevisionNotFoundError:
        raise ConfigError(f"model {repo_id!r} has no revision {revision!r} on the Hugging Face Hub") from None
    except RepositoryNotFoundError:
        raise ConfigError(
            f"model {repo_id!r} is neither a local path nor a model on the Hugging Face Hub "
            "(check the id; a private model needs `hf auth login`)"
        ) from None
    except Exception as e:  # network errors come from httpx/requests/OSError depending on the hub client version
        raise ConfigError(
            f"cannot reach the Hugging Face Hub to find model {repo_id!r} ({hub_error(e)}), and it is not in the "
            "local cache: check the network, pass a local directory, or set HF_HUB_OFFLINE=1 for cached models"
        ) from None
