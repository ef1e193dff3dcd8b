"""The HTTP side of every call, as pure builders: what to send and how to read the answer.

Both clients (sync and asyncio) send the same :class:`Request` and read answers with the same
functions; only the I/O differs.
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass, field
from typing import IO, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote, urlencode

from ._contract import DEFAULTS, ROUTES
from .errors import WarrenError, error_from_wire
from .types import ExecEvent, ExecResult, Image, camel, from_wire

Body = Union[bytes, str, IO[bytes], None]
Cmd = Union[str, Sequence[str]]


@dataclass
class Request:
    method: str
    path: str
    query: List[Tuple[str, str]] = field(default_factory=list)
    json: Any = None
    body: Body = None
    content_type: Optional[str] = None
    accept: str = "application/json"
    #: Safe to send again after a failure: reads, deletes, and calls with a request id.
    idempotent: bool = False
    #: Seconds to wait for the answer (None: the client's default).
    timeout: Optional[float] = None

    def target(self) -> str:
        return self.path + ("?" + urlencode(self.query) if self.query else "")

    def payload(self) -> Tuple[Union[bytes, IO[bytes], None], Dict[str, str]]:
        """The body to send and its headers (content type and length where known)."""
        headers = {"accept": self.accept}
        if self.json is not None:
            data: Union[bytes, IO[bytes], None] = json.dumps(self.json, separators=(",", ":")).encode()
            headers["content-type"] = "application/json"
        elif self.body is None:
            data = None
        else:
            data = self.body.encode() if isinstance(self.body, str) else self.body
            headers["content-type"] = self.content_type or "application/octet-stream"
        if isinstance(data, bytes):
            headers["content-length"] = str(len(data))
        elif data is not None:
            headers["content-length"] = str(os.fstat(data.fileno()).st_size - data.tell())
        elif self.method in ("POST", "PUT", "PATCH"):
            headers["content-length"] = "0"
        return data, headers


def seg(s: str) -> str:
    """One path segment, escaped."""
    return quote(s, safe="")


#: The label batch operations' routes (POST /v1/batch/{op}).
BATCH_ROUTES = {"pause": "batchPause", "resume": "batchResume", "delete": "batchDelete"}

_PLACEHOLDER = re.compile(r"\{[A-Za-z]+\}")


def route(name: str, *params: str, **kw: Any) -> Request:
    """The request of a route of the contract (``_contract.py``): its method, and its path with the
    placeholders filled in order by ``params``, each one escaped as a path segment."""
    method, template = ROUTES[name]
    wanted = len(_PLACEHOLDER.findall(template))
    if wanted != len(params):
        raise TypeError(f"route {name} ({template}) takes {wanted} path parameters, not {len(params)}")
    values = iter(params)
    return Request(method, _PLACEHOLDER.sub(lambda _m: seg(next(values)), template), **kw)


#: How long a command cut off waits for its sandbox's end to be recorded (its node tells within a couple of seconds).
END_WAIT_S = 4.0


def drop_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def wire_keys(d: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """A nested option object (resources, lifetime, network) with its keys in the API's names."""
    return None if d is None else {camel(k): v for k, v in d.items()}


def encode_files(files: Union[Mapping[str, Union[str, bytes]], Iterable[Mapping[str, Any]], None]) -> Optional[List[Dict[str, Any]]]:
    """``{"/path": "text" | b"bytes"}`` or ``[{"path", "content", "mode"}]`` to the API's base64 entries."""
    if files is None:
        return None
    items: Iterable[Mapping[str, Any]] = (
        [{"path": p, "content": c} for p, c in files.items()] if isinstance(files, Mapping) else files
    )
    out = []
    for f in items:
        c = f["content"]
        raw = c.encode() if isinstance(c, str) else bytes(c)
        e: Dict[str, Any] = {"path": f["path"], "content": base64.b64encode(raw).decode()}
        if f.get("mode") is not None:
            e["mode"] = f["mode"]
        out.append(e)
    return out


def _lifetime(lifetime: Optional[Mapping[str, Any]], ttl_seconds: Optional[int]) -> Dict[str, Any]:
    life = dict(wire_keys(lifetime) or {})
    if ttl_seconds is not None:
        life["ttlSeconds"] = ttl_seconds
    return life


def create_body(
    image: Optional[str] = None,
    *,
    snapshot: Optional[str] = None,
    layers: Optional[Sequence[str]] = None,
    resources: Optional[Mapping[str, Any]] = None,
    lifetime: Optional[Mapping[str, Any]] = None,
    network: Optional[Mapping[str, Any]] = None,
    env: Optional[Mapping[str, str]] = None,
    user: Optional[str] = None,
    workdir: Optional[str] = None,
    files: Any = None,
    labels: Optional[Mapping[str, str]] = None,
    request_id: Optional[str] = None,
    backend: Optional[str] = None,
    ttl_seconds: Optional[int] = None,
    lease: Any = None,
) -> Dict[str, Any]:
    life = _lifetime(lifetime, ttl_seconds)
    return drop_none(
        {
            "image": image,
            "snapshot": snapshot,
            "backend": backend,
            "layers": list(layers) if layers is not None else None,
            "resources": wire_keys(resources),
            "lifetime": life or None,
            "network": wire_keys(network),
            "env": dict(env) if env is not None else None,
            "user": user,
            "workdir": workdir,
            "files": encode_files(files),
            "labels": dict(labels) if labels is not None else None,
            "requestId": request_id,
            # A lease object (``w.lease(...)``) or its id.
            "lease": lease if lease is None or isinstance(lease, str) else lease.id,
        }
    )


def fork_body(
    count: int = 1,
    *,
    labels: Optional[Mapping[str, str]] = None,
    lifetime: Optional[Mapping[str, Any]] = None,
    ttl_seconds: Optional[int] = None,
    lease: Any = None,
    resources: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    life = _lifetime(lifetime, ttl_seconds)
    return drop_none(
        {
            "count": count,
            "labels": dict(labels) if labels is not None else None,
            "lifetime": life or None,
            "lease": lease if lease is None or isinstance(lease, str) else lease.id,
            "resources": wire_keys(resources),
        }
    )


def exec_body(
    cmd: Cmd,
    *,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    user: Optional[str] = None,
    stdin: Optional[str] = None,
    timeout_ms: Optional[int] = None,
    session: Optional[str] = None,
    max_output_bytes: Optional[int] = None,
    keep_output: Optional[str] = None,
    request_id: Optional[str] = None,
    keep_stdin_open: Optional[bool] = None,
) -> Dict[str, Any]:
    return drop_none(
        {
            "cmd": cmd if isinstance(cmd, str) else list(cmd),
            "cwd": cwd,
            "env": dict(env) if env is not None else None,
            "user": user,
            "stdin": stdin,
            "timeoutMs": timeout_ms,
            "session": session,
            "maxOutputBytes": max_output_bytes,
            "keepOutput": keep_output,
            "requestId": request_id,
            "keepStdinOpen": keep_stdin_open,
        }
    )


#: Time an answer may take beyond a command's own timeout (queueing, output, the network).
EXEC_SLACK_S = 60.0
#: A command's default timeout on the server (ExecRequest.timeoutMs).
DEFAULT_EXEC_TIMEOUT_MS: int = DEFAULTS["exec"]["timeoutMs"]


def exec_request(sid: str, body: Dict[str, Any], *, stream: bool) -> Request:
    ms = body.get("timeoutMs")
    return route(
        "exec",
        sid,
        json=body,
        accept="application/x-ndjson" if stream else "application/json",
        idempotent="requestId" in body,
        # A streamed command may be silent for as long as it runs: no read deadline there.
        timeout=None if stream or ms is None else ms / 1000 + EXEC_SLACK_S,
    )


def attach_request(sid: str, command_id: str, offset: int) -> Request:
    return route("commandOutput", sid, command_id, query=[("offset", str(offset))], accept="application/x-ndjson", idempotent=True)


def list_query(labels: Optional[Mapping[str, str]], state: Optional[str], limit: Optional[int], cursor: Optional[str]) -> List[Tuple[str, str]]:
    q = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
    if state:
        q.append(("state", state))
    if limit:
        q.append(("limit", str(limit)))
    if cursor:
        q.append(("cursor", cursor))
    return q


def file_mode(mode: Optional[int]) -> List[Tuple[str, str]]:
    return [] if mode is None else [("mode", format(mode, "04o"))]


def parse_json(status: int, data: bytes) -> Any:
    """A JSON answer, or the error it carries."""
    try:
        body = json.loads(data) if data else None
    except ValueError:
        body = None
    if status >= 400:
        raise error_from_wire(status, body)
    return body


def event(obj: Mapping[str, Any]) -> ExecEvent:
    return from_wire(ExecEvent, obj)


def raise_if_error(ev: ExecEvent) -> None:
    """A stream's ``error`` line is the error of the call."""
    if ev.type == "error":
        e = ev.error or {}
        raise error_from_wire(None, {"error": e})


class ResultBuilder:
    """Folds a command's events into the ExecResult an exec would have answered."""

    def __init__(self, command_id: str = "") -> None:
        self.command_id = command_id
        self.out: List[str] = []
        self.err: List[str] = []
        self.result: Optional[ExecResult] = None

    def add(self, ev: ExecEvent) -> None:
        raise_if_error(ev)
        if ev.type == "start" and ev.command_id:
            self.command_id = ev.command_id
        elif ev.type == "stdout":
            self.out.append(ev.data or "")
        elif ev.type == "stderr":
            self.err.append(ev.data or "")
        elif ev.type == "exit":
            self.result = ExecResult(
                command_id=self.command_id,
                stdout="".join(self.out),
                stderr="".join(self.err),
                exit_code=ev.exit_code,
                signal=ev.signal,
                duration_ms=ev.duration_ms or 0,
                timed_out=bool(ev.timed_out),
                truncated=bool(ev.truncated),
                killed_by=ev.killed_by,
                limits_hit=list(ev.limits_hit or []),
            )

    def finish(self) -> ExecResult:
        if self.result is None:
            raise WarrenError("the command's stream ended before it did", code="unavailable")
        return self.result


def fn_body(
    language: str,
    code: str,
    *,
    stdin: Optional[str] = None,
    timeout_ms: Optional[int] = None,
    image: Optional[str] = None,
    files: Optional[Sequence[Mapping[str, Any]]] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    resources: Optional[Mapping[str, Any]] = None,
    max_output_bytes: Optional[int] = None,
) -> Dict[str, Any]:
    return drop_none(
        {
            "language": language,
            "code": code,
            "stdin": stdin,
            "timeoutMs": timeout_ms,
            "image": image,
            "files": [dict(f) for f in files] if files is not None else None,
            "env": dict(env) if env is not None else None,
            "cwd": cwd,
            "resources": wire_keys(resources),
            "maxOutputBytes": max_output_bytes,
        }
    )


def fn_timeout(opts: Mapping[str, Any]) -> float:
    """How long a FnCall's answer may take: its own timeout (default 10 s), queueing and slack."""
    return float(opts.get("timeout_ms") or 10_000) / 1000 + EXEC_SLACK_S


def fn_outcome(obj: Mapping[str, Any]) -> Any:
    from .types import FnResult

    if "error" in obj and isinstance(obj["error"], dict):
        return error_from_wire(None, obj)
    return from_wire(FnResult, obj)


def image_result(lines: Iterable[Any], on_progress: Any = None) -> "Image":
    """The last line of an import or pull: the image, or the error it reports."""
    from .types import ImageProgress

    for obj in lines:
        t = obj.get("type")
        if t == "progress":
            if on_progress is not None:
                on_progress(from_wire(ImageProgress, obj))
        elif t == "done":
            return from_wire(Image, obj["image"])
        else:
            raise error_from_wire(None, obj)
    raise WarrenError("the stream ended without a result", code="unavailable")


def pool_body(
    image: str,
    size: int,
    *,
    layers: Optional[Sequence[str]] = None,
    resources: Optional[Mapping[str, Any]] = None,
    network: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    return drop_none(
        {
            "image": image,
            "size": size,
            "layers": list(layers) if layers is not None else None,
            "resources": wire_keys(resources),
            "network": wire_keys(network),
        }
    )


def key_body(tenant: str, *, role: Optional[str] = None, quota: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    return drop_none({"tenant": tenant, "role": role, "quota": wire_keys(quota)})
