"""Choosing an LLM by name, as the command line does, and one-line reasons when it cannot work.

Two forms, both through ``llama-index-llms-openai``:

* ``openai:MODEL``: the OpenAI API (``OpenAI``; a model name LlamaIndex does not know yet, e.g.
  a new or fine-tuned one, goes through ``OpenAILike`` with the given context window instead of
  failing); key from ``OPENAI_API_KEY``.
* ``openai-compatible:MODEL``: any server that speaks the OpenAI API (vLLM, Ollama, LM Studio,
  llama.cpp server, gateways) through LlamaIndex's ``OpenAILike``, at ``base_url`` (or
  ``OPENAI_BASE_URL``); key from ``OPENAI_API_KEY`` when the server wants one.

[`check_llm`][llama_index_hiqa.models.llm_spec.check_llm] asks the server once before a long run (its model list, else a one-token
completion) so that a wrong URL, a refused connection, a rejected key or a model the server
does not have is one clear [`LLMConfigError`][llama_index_hiqa.errors.LLMConfigError] rather than a
traceback after the first document; [`describe_llm_error`][llama_index_hiqa.models.llm_spec.describe_llm_error] words the same failures when
they happen mid-run.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional
from urllib.parse import urlparse

from llama_index_hiqa.errors import LLMConfigError

KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
PROVIDERS = ("openai", "openai-compatible")
DEFAULT_CONTEXT_WINDOW = 32_768  # OpenAILike's own default (3,900) cuts modern models short
DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_CLIENT_RETRIES = 2  # the openai client's retries honour Retry-After
NO_KEY = "not-needed"  # local servers ignore the key, the openai client insists on one
CHECK_TIMEOUT_SECONDS = 10.0


def llm_from_spec(
    spec: Optional[str],
    *,
    base_url: Optional[str] = None,
    context_window: Optional[int] = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_retries: int = DEFAULT_CLIENT_RETRIES,
) -> Any:
    """A LlamaIndex LLM from a name such as ``"openai:gpt-4o-mini"``. Nothing is sent.

    ``"openai-compatible:qwen2.5-7b-instruct"`` names a model on any OpenAI-compatible server;
    ``None`` or ``"none"`` means evidence-only answers.

    Args:
        spec: ``PROVIDER:MODEL`` with ``PROVIDER`` ``openai`` or ``openai-compatible``;
            ``None`` or ``"none"`` for no LLM.
        base_url: the server's URL (``http://HOST:PORT/v1``); ``None`` reads the environment
            variable, and ``openai`` then uses OpenAI's own.
        context_window: the model's context window in tokens (at least 256); ``None``: the
            known window of an OpenAI model, else `DEFAULT_CONTEXT_WINDOW`.
        timeout_seconds: how long one request may take, in seconds.
        max_retries: retries of the ``openai`` client on a failed request.

    Returns:
        An ``OpenAI`` or ``OpenAILike`` LLM, or ``None`` for no LLM.

    Raises:
        LLMConfigError: malformed name, too small a window, missing API key (``openai``),
            missing or malformed server URL (names the spec).
    """
    if not spec or spec.strip().lower() == "none":
        return None
    provider, _, model = spec.partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if provider not in PROVIDERS or not model:
        raise LLMConfigError(spec, f"expected PROVIDER:MODEL with PROVIDER one of {list(PROVIDERS)}, "
                                   "e.g. openai:gpt-4o-mini or openai-compatible:qwen2.5-7b-instruct")
    if context_window is not None and context_window < 256:
        raise LLMConfigError(spec, f"context window {context_window} is too small (tokens, e.g. 32768)")
    key = os.environ.get(KEY_ENV)
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    if provider == "openai" and not key:
        raise LLMConfigError(spec, f"the environment variable {KEY_ENV} is not set "
                                   f"(export {KEY_ENV}=... or drop --llm for evidence-only answers)")
    if provider == "openai-compatible" and not base_url:
        raise LLMConfigError(spec, f"no server URL: pass --llm-base-url http://HOST:PORT/v1 or set {BASE_URL_ENV}")
    if base_url is not None:
        _check_url(spec, base_url)
    common: Dict[str, Any] = dict(api_key=key or NO_KEY, timeout=timeout_seconds, max_retries=max_retries)
    if base_url:
        common["api_base"] = base_url.rstrip("/")
    if provider == "openai" and context_window is None and _known_openai_model(model):
        # the OpenAI client (~1.8 s to import) loads when an OpenAI LLM is used.
        from llama_index.llms.openai import OpenAI

        return OpenAI(model=model, **common)
    # LlamaIndex's OpenAI-compatible client (~1.8 s to import) loads when such an LLM is made.
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(
        model=model, is_chat_model=True, context_window=context_window or DEFAULT_CONTEXT_WINDOW, **common
    )


def _known_openai_model(model: str) -> bool:
    # The OpenAI client (~1.8 s to import) loads when an OpenAI LLM is used.
    from llama_index.llms.openai.utils import openai_modelname_to_contextsize

    try:
        openai_modelname_to_contextsize(model)
    except ValueError:
        return False
    return True


def _check_url(spec: str, url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise LLMConfigError(spec, f"{url!r} is not an http(s) URL (e.g. http://localhost:8000/v1)")
    try:
        parsed.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise LLMConfigError(spec, f"{url!r}: {exc}") from exc


def check_llm(llm: Any, spec: Optional[str] = None) -> None:
    """Ask an OpenAI-API LLM's server, once, whether it can serve.

    Its model list (and that the model is on it), else a one-token completion (gateways
    without ``/models``). Other LLMs pass unchecked.

    Args:
        llm: the LLM to check.
        spec: the name the user gave, used in the error; ``None`` names the model.

    Raises:
        LLMConfigError: the server cannot be reached, refuses the key or lacks the model
            (one line saying what is wrong).
    """
    # the OpenAI client (~1.8 s to import) loads when an OpenAI LLM is used.
    from llama_index.llms.openai import OpenAI

    if not isinstance(llm, OpenAI):
        return
    import openai

    label = spec or f"openai-compatible:{llm.model}"
    client = openai.OpenAI(
        api_key=llm.api_key or NO_KEY, base_url=llm.api_base, timeout=CHECK_TIMEOUT_SECONDS, max_retries=0
    )
    try:
        models = [m.id for m in client.models.list()]
    except openai.NotFoundError:
        models = None  # no /models route: try the completion itself below
    # The openai client raises many types (connection, auth, HTTP): one typed error, described.
    except Exception as exc:
        raise LLMConfigError(label, describe_llm_error(exc, llm.api_base)) from exc
    if models is not None:
        if llm.model not in models:
            shown = ", ".join(models[:8]) + (" …" if len(models) > 8 else "")
            raise LLMConfigError(label, f"the server at {llm.api_base} has no model {llm.model!r} "
                                        f"(it has: {shown or 'none'})")
        return
    try:
        client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": "ping"}], max_tokens=1
        )
    # As above: every client error becomes one typed error.
    except Exception as exc:
        raise LLMConfigError(label, describe_llm_error(exc, llm.api_base, model=llm.model)) from exc


def describe_llm_error(error: BaseException, base_url: Optional[str] = None, model: Optional[str] = None) -> str:
    """One line for an ``openai`` client error.

    Refused connection, wrong URL, rejected key, unknown model, rate limit, timeout; anything
    else as ``Type: message``.

    Args:
        error: the exception the client raised.
        base_url: the server's URL, named in the line; ``None`` leaves it out.
        model: the model asked for, named when the server does not have it.

    Returns:
        The line, saying what to check.
    """
    # the OpenAI client (~1.8 s to import) loads when an OpenAI LLM is used.
    import openai

    where = f" at {base_url}" if base_url else ""
    if isinstance(error, openai.APITimeoutError):
        return f"the server{where} did not answer in time (raise the timeout or check the server's load)"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return f"cannot connect to the server{where} ({type(cause).__name__}: {cause}); is it running and is the URL right?"
    if isinstance(error, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return (f"the server{where} refused the API key ({error.status_code}); "
                f"check {KEY_ENV}")
    if isinstance(error, openai.NotFoundError):
        body = getattr(error, "body", None)
        code = body.get("code") if isinstance(body, dict) else None
        if code == "model_not_found" or (model and "model" in str(error).lower()):
            return f"the server{where} has no model {model!r}" if model else f"model not found{where}: {error.message}"
        return (f"nothing OpenAI-compatible{where} (404 {getattr(error, 'message', error)}); "
                "the base URL usually ends in /v1")
    if isinstance(error, openai.RateLimitError):
        return f"the server{where} is rate limiting (429) even after retries; try again later or lower the concurrency"
    if isinstance(error, openai.APIStatusError):
        return f"the server{where} answered {error.status_code}: {getattr(error, 'message', error)}"
    return f"{type(error).__name__}: {error}"


def is_llm_client_error(error: BaseException) -> bool:
    """Whether ``error`` comes from the ``openai`` client (a server problem a user can act on).

    Args:
        error: any exception.

    Returns:
        ``True`` for an ``openai.OpenAIError``.
    """
    try:
        # the OpenAI client (~1.8 s to import) loads when an OpenAI LLM is used.
        import openai
    except ImportError:  # pragma: no cover - a dependency of the pack
        return False
    return isinstance(error, openai.OpenAIError)
