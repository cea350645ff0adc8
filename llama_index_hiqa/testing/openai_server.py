"""An OpenAI-compatible HTTP server for tests and benchmarks: scripted answers, injected faults.

The pack's LLM paths run through ``llama-index-llms-openai`` against hosted OpenAI and the
OpenAI-compatible servers teams run themselves (vLLM, Ollama, LM Studio, llama.cpp server,
gateways). This server lets a test suite exercise that real client path offline: it listens
on 127.0.0.1 (an ephemeral port, loopback only), answers ``POST /v1/chat/completions`` and
``POST /v1/completions`` (plain JSON or Server-Sent Events streaming, with ``usage``) from a
script, lists its model at ``GET /v1/models``, checks the API key when given one, and injects
the faults a real server produces:

========================  ==================================================================
``"rate_limit"``          429 with ``Retry-After: retry_after_seconds``
``"server_error"``        500 with an OpenAI error body
``"slow"``                the answer after ``slow_seconds`` (past the client's timeout)
``"truncated_json"``      200 whose JSON body is cut in half
``"empty_choice"``        200 with ``"choices": []``
========================  ==================================================================

Faults come from the script (a [`Fault`][llama_index_hiqa.testing.openai_server.Fault] in place of an answer), from ``faults=`` (used
first, one per request) or at random with ``fault_rate`` (which requests fail is drawn with
``seed``, so runs repeat; the kinds of ``fault_kinds`` take turns)::

    with OpenAICompatibleServer(["# 1 Intro"], fault_rate=0.1) as server:
        llm = server.llm(timeout=2.0)          # OpenAILike(api_base=server.url, ...)
        print(llm.complete("hello").text, server.stats)

The server runs in daemon threads, never waits longer than ``slow_seconds`` per request and
shuts itself down after ``lifetime_seconds`` even when a test forgets to stop it.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from llama_index_hiqa.testing.scripts import Answer, Script, count_tokens, next_scripted_answer

__all__ = ["FAULT_KINDS", "Fault", "ServerStats", "OpenAICompatibleServer"]

FAULT_KINDS = ("rate_limit", "server_error", "slow", "truncated_json", "empty_choice")


@dataclass(frozen=True)
class Fault:
    """One injected fault (one of [`FAULT_KINDS`][llama_index_hiqa.testing.openai_server.FAULT_KINDS]) in place of an answer."""

    kind: str

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, got {self.kind!r}")


@dataclass
class ServerStats:
    """What the server saw: requests by path, completions answered, tokens, faults injected."""

    requests: int = 0
    completions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    streamed: int = 0
    max_in_flight: int = 0  # most completion requests served at the same time
    # (monotonic time, "answer" or the fault kind) per completion request, in arrival order
    events: List[Tuple[float, str]] = field(default_factory=list)
    # the url of every image content part received (``data:image/png;base64,...``), in order
    image_urls: List[str] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> Dict[str, Any]:
        return {
            "requests": self.requests, "completions": self.completions, "streamed": self.streamed,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "faults": dict(self.faults), "max_in_flight": self.max_in_flight,
        }


class OpenAICompatibleServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        responses: Union[Script, Sequence[Union[Answer, Fault]]] = (),
        *,
        model: str = "test-model",
        api_key: Optional[str] = None,
        default_response: Optional[str] = None,
        latency_seconds: float = 0.0,
        faults: Sequence[Union[str, Fault]] = (),
        fault_rate: float = 0.0,
        fault_kinds: Sequence[str] = FAULT_KINDS,
        retry_after_seconds: float = 0.1,
        slow_seconds: float = 2.0,
        stream_chunk_words: int = 1,
        seed: int = 0,
        lifetime_seconds: float = 600.0,
    ) -> None:
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must lie in [0, 1], got {fault_rate}")
        self.model, self.api_key = model, api_key
        self.default_response = default_response
        self.latency_seconds, self.slow_seconds = latency_seconds, slow_seconds
        self.retry_after_seconds = retry_after_seconds
        self.fault_rate = fault_rate
        self.fault_kinds = tuple(Fault(k).kind for k in fault_kinds)
        self.stream_chunk_words = max(1, stream_chunk_words)
        self.lifetime_seconds = lifetime_seconds
        self.stats = ServerStats()
        self.prompts: List[str] = []
        self._script = responses if callable(responses) else list(responses)
        self._index = 0
        self._queued_faults = [f if isinstance(f, Fault) else Fault(f) for f in faults]
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._random_faults = 0
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._timer: Optional[threading.Timer] = None

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> "OpenAICompatibleServer":
        handler = type("_Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name="openai-test-server", daemon=True,
        )
        self._thread.start()
        self._timer = threading.Timer(self.lifetime_seconds, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()

    def __enter__(self) -> "OpenAICompatibleServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The API base, e.g. ``http://127.0.0.1:54321/v1``."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; call start() or use it as a context manager")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def llm(self, **kwargs: Any) -> Any:
        """LlamaIndex's ``OpenAILike`` pointed at this server (chat model, no client retries:
        the pack's components retry themselves; pass ``max_retries=`` to change that)."""
        # the OpenAI client (~1.8 s to import) loads when an OpenAI LLM is used.
        from llama_index.llms.openai_like import OpenAILike

        settings: Dict[str, Any] = dict(
            model=self.model, api_base=self.url, api_key=self.api_key or "test",
            is_chat_model=True, max_retries=0, timeout=10.0, context_window=32_768,
        )
        settings.update(kwargs)
        return OpenAILike(**settings)

    # -- answers ---------------------------------------------------------------------------
    def _next(self, prompt: str) -> Union[str, Fault]:
        answer = self._pick(prompt)
        with self._lock:
            self.stats.events.append((time.monotonic(), answer.kind if isinstance(answer, Fault) else "answer"))
        return answer

    def _pick(self, prompt: str) -> Union[str, Fault]:
        with self._lock:
            self.stats.completions += 1
            self.prompts.append(prompt)
            if self._queued_faults:
                return self._queued_faults.pop(0)
            if self.fault_rate and self._random.random() < self.fault_rate:
                # which requests fail is random (seeded); the kinds take turns, so a run with
                # as many faults as kinds has met every one
                kind = self.fault_kinds[self._random_faults % len(self.fault_kinds)]
                self._random_faults += 1
                return Fault(kind)
            answer, self._index = next_scripted_answer(self._script, self._index, self.default_response, prompt)
            if answer is None:
                return Fault("server_error")  # script used up: a loud 500, not a hang
        if isinstance(answer, BaseException):
            return Fault("server_error")
        return answer


class _Handler(BaseHTTPRequestHandler):
    server_state: OpenAICompatibleServer
    protocol_version = "HTTP/1.0"  # one request per connection: no keep-alive bookkeeping

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        return

    # -- plumbing -----------------------------------------------------------------------
    def _send_json(self, status: int, payload: Any, headers: Optional[Dict[str, str]] = None,
                   body: Optional[bytes] = None) -> None:
        data = body if body is not None else json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass

    def _error(self, status: int, message: str, kind: str, code: Optional[str] = None,
               headers: Optional[Dict[str, str]] = None) -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "param": None, "code": code}}, headers)

    def _authorised(self) -> bool:
        key = self.server_state.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return False

    # -- routes -------------------------------------------------------------------------
    def do_GET(self) -> None:
        state = self.server_state
        with state._lock:
            state.stats.requests += 1
        if not self._authorised():
            return
        if self.path.rstrip("/") == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{"id": state.model, "object": "model", "owned_by": "test"}]})
        else:
            self._error(404, f"no route {self.path}", "invalid_request_error")

    def do_POST(self) -> None:
        state = self.server_state
        with state._lock:
            state.stats.requests += 1
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._error(400, "request body is not JSON", "invalid_request_error")
            return
        if not self._authorised():
            return
        route = self.path.rstrip("/")
        if route not in ("/v1/chat/completions", "/v1/completions"):
            self._error(404, f"no route {self.path}", "invalid_request_error")
            return
        if request.get("model") != state.model:
            self._error(404, f"The model `{request.get('model')}` does not exist.",
                        "invalid_request_error", "model_not_found")
            return
        chat = route.endswith("chat/completions")
        if chat:
            prompt = "\n".join(_content_text(m.get("content")) for m in request.get("messages") or [])
            images = [url for m in request.get("messages") or [] for url in _image_urls(m.get("content"))]
            if images:
                with state._lock:
                    state.stats.image_urls.extend(images)
        else:
            prompt = str(request.get("prompt") or "")
        with state._lock:
            state._in_flight += 1
            state.stats.max_in_flight = max(state.stats.max_in_flight, state._in_flight)
        try:
            self._answer(state, prompt, chat, request)
        finally:
            with state._lock:
                state._in_flight -= 1

    def _answer(self, state: OpenAICompatibleServer, prompt: str, chat: bool, request: Dict[str, Any]) -> None:
        answer = state._next(prompt)
        if state.latency_seconds:
            time.sleep(state.latency_seconds)
        if isinstance(answer, Fault):
            with state._lock:
                state.stats.faults[answer.kind] += 1
            if answer.kind != "slow":
                self._fault(answer.kind, chat)
                return
            time.sleep(state.slow_seconds)
            answer = state.default_response or "(slow answer)"
        prompt_tokens, completion_tokens = count_tokens(prompt), count_tokens(answer)
        with state._lock:
            state.stats.prompt_tokens += prompt_tokens
            state.stats.completion_tokens += completion_tokens
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        if request.get("stream"):
            with state._lock:
                state.stats.streamed += 1
            self._stream(answer, chat, usage, bool((request.get("stream_options") or {}).get("include_usage")))
        else:
            self._send_json(200, _completion(state.model, answer, chat, usage))

    def _fault(self, kind: str, chat: bool) -> None:
        state = self.server_state
        if kind == "rate_limit":
            self._error(429, "Rate limit reached, retry later.", "rate_limit_error", "rate_limit_exceeded",
                        headers={"Retry-After": f"{state.retry_after_seconds:g}"})
        elif kind == "server_error":
            self._error(500, "The server had an error while processing your request.", "server_error")
        elif kind == "truncated_json":
            body = json.dumps(_completion(state.model, "cut " * 20, chat, None)).encode("utf-8")
            self._send_json(200, None, body=body[: len(body) // 2])
        elif kind == "empty_choice":
            payload = _completion(state.model, "", chat, None)
            payload["choices"] = []
            self._send_json(200, payload)

    def _stream(self, answer: str, chat: bool, usage: Dict[str, int], include_usage: bool) -> None:
        state = self.server_state
        words = answer.split(" ")
        size = state.stream_chunk_words
        pieces = [" ".join(words[i : i + size]) + (" " if i + size < len(words) else "")
                  for i in range(0, len(words), size)] or [""]
        stream_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for i, piece in enumerate(pieces):
                delta: Dict[str, Any] = {"content": piece}
                if i == 0:
                    delta["role"] = "assistant"
                choice = {"index": 0, "delta": delta, "finish_reason": None} if chat else \
                    {"index": 0, "text": piece, "finish_reason": None, "logprobs": None}
                self._event(_chunk(stream_id, state.model, chat, [choice]))
            last = {"index": 0, "delta": {}, "finish_reason": "stop"} if chat else \
                {"index": 0, "text": "", "finish_reason": "stop", "logprobs": None}
            self._event(_chunk(stream_id, state.model, chat, [last]))
            if include_usage:
                self._event({**_chunk(stream_id, state.model, chat, []), "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _event(self, payload: Dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n")
        self.wfile.flush()


def _image_urls(content: Any) -> List[str]:
    """The urls of a message's ``image_url`` content parts (OpenAI's multimodal shape)."""
    if not isinstance(content, list):
        return []
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = part.get("image_url")
            urls.append(str(image.get("url") if isinstance(image, dict) else image or ""))
    return urls


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts: keep the text ones
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _completion(model: str, answer: str, chat: bool, usage: Optional[Dict[str, int]]) -> Dict[str, Any]:
    created = int(time.time())
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop",
                  "logprobs": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": answer, "finish_reason": "stop", "logprobs": None}
        obj = "text_completion"
    payload: Dict[str, Any] = {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": obj, "created": created,
                               "model": model, "choices": [choice]}
    if usage is not None:
        payload["usage"] = usage
    return payload


def _chunk(stream_id: str, model: str, chat: bool, choices: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"id": stream_id, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": choices}
