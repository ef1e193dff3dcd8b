"""What the API answers, as dataclasses with Python names (the wire keeps the API's names).

Each class is built from the wire object by :func:`from_wire`; keys the client does not know
(a newer server's) are kept in ``raw`` and nowhere else.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Type, TypeVar, cast

T = TypeVar("T")


_UPPER = re.compile(r"([A-Z])")
#: Wire keys already converted: an answer's keys are a few dozen names, and a regex a key was a
#: third of a create's client CPU. Bounded: a server's keys are not all kept.
_SNAKE: Dict[str, str] = {}
_SNAKE_MAX = 4096


def snake(key: str) -> str:
    """``memoryMiB`` → ``memory_mib``, ``exitCode`` → ``exit_code``."""
    n = _SNAKE.get(key)
    if n is None:
        n = _UPPER.sub(lambda m: "_" + m.group(1).lower(), key.replace("MiB", "Mib"))
        if len(_SNAKE) < _SNAKE_MAX:
            _SNAKE[key] = n
    return n


def camel(key: str) -> str:
    """``memory_mib`` → ``memoryMiB``, ``ttl_seconds`` → ``ttlSeconds``; a wire name stays as it is."""
    head, *rest = key.split("_")
    out = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return out.replace("Mib", "MiB")


#: Each dataclass's field names (the classes are this module's: a fixed, small set).
_FIELDS: Dict[type, FrozenSet[str]] = {}


def from_wire(cls: Type[T], obj: Mapping[str, Any]) -> T:
    """A dataclass from a wire object: camelCase keys to its snake_case fields, the rest in ``raw``."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cast(Any, cls)))
    kw: Dict[str, Any] = {}
    for k, v in obj.items():
        n = snake(k)
        if n in names and n != "raw":
            kw[n] = v
    if "raw" in names:
        kw["raw"] = dict(obj)
    return cls(**kw)


@dataclass
class ExecResult:
    """A finished command. ``exit_code`` is None when a signal ended it (``signal`` says which)."""

    command_id: str = ""
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    duration_ms: float = 0
    timed_out: bool = False
    truncated: bool = False
    #: Who ended it when not itself: "timeout", "request" (a kill through the API), "oom" (the
    #: kernel at the sandbox's memory limit); None: it exited.
    killed_by: Optional[str] = None
    #: The sandbox's own limits it ran into: "memory", "pids" (a fork refused), "disk" (its disk
    #: full); told of a command that did not exit 0, [] otherwise. The sandbox lives on.
    limits_hit: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class ExecEvent:
    """One event of a streamed command: ``type`` is start, stdout, stderr, exit or error."""

    type: str
    command_id: Optional[str] = None
    data: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    duration_ms: Optional[float] = None
    timed_out: Optional[bool] = None
    truncated: Optional[bool] = None
    #: An exit's: "timeout", "request", "oom", or None (it exited).
    killed_by: Optional[str] = None
    #: An exit's: the sandbox's own limits it ran into ("memory", "pids", "disk").
    limits_hit: Optional[List[str]] = None
    error: Optional[Dict[str, Any]] = None


@dataclass
class FileEntry:
    name: str
    path: str
    type: str
    size: int
    mode: int
    mtime: str
    target: Optional[str] = None


@dataclass
class Resources:
    cpu: float = 0
    #: The hard limit; ``memory_request_mib`` is what the node commits for the sandbox.
    memory_mib: int = 0
    memory_request_mib: int = 0
    pids: int = 0
    disk_mib: Optional[int] = None
    #: "latency" or "batch": how its CPU time is shared with the node's other sandboxes.
    cpu_class: str = "latency"


@dataclass
class Usage:
    cpu_seconds: float = 0
    cpu_recent: float = 0
    memory_bytes: int = 0
    swap_bytes: int = 0
    idle_seconds: float = 0


@dataclass
class SandboxInfo:
    id: str
    state: str = ""
    backend: str = "container"
    image: str = ""
    layers: List[str] = field(default_factory=list)
    node: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    user: Optional[str] = None
    workdir: Optional[str] = None
    created_at: str = ""
    expires_at: Optional[str] = None
    last_activity_at: str = ""
    idle_timeout_seconds: Optional[int] = None
    pause_after_idle_seconds: Optional[int] = None
    usage: Usage = field(default_factory=Usage)
    network: Dict[str, Any] = field(default_factory=dict)
    error: Optional[Dict[str, Any]] = None
    #: The lease it lives under (None: none).
    lease: Optional[str] = None
    #: Why and when it ended (None while it lives): ``{"reason", "by", "detail", "at"}``, ``by`` is
    #: "agent", "operator" or "platform".
    end: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> "SandboxInfo":
        info = from_wire(cls, obj)
        info.resources = from_wire(Resources, obj.get("resources") or {})
        info.usage = from_wire(Usage, obj.get("usage") or {})
        return info


@dataclass
class Image:
    name: str
    layers: List[str] = field(default_factory=list)
    size_bytes: int = 0
    created_at: str = ""
    tenant: Optional[str] = None
    env: Dict[str, str] = field(default_factory=dict)
    built_in: bool = False
    #: A snapshot's source, backend, user and workdir (None: an image that is not a snapshot).
    snapshot: Optional[Dict[str, Any]] = None
    #: In a list: the live sandboxes created from it (this tenant's; an admin's key: every tenant's).
    used_by: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Layer:
    name: str
    digest: str = ""
    size_bytes: int = 0
    created_at: str = ""
    tenant: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Pool:
    id: str
    image: str = ""
    layers: List[str] = field(default_factory=list)
    resources: Dict[str, Any] = field(default_factory=dict)
    network: Dict[str, Any] = field(default_factory=dict)
    size: int = 0
    ready: int = 0
    claims: int = 0
    claims_per_second: float = 0
    last_error: Optional[str] = None
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class FnResult:
    """A FnCall's answer: an exec's, and ``queued_ms`` waiting for a free worker."""

    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    duration_ms: float = 0
    timed_out: bool = False
    truncated: bool = False
    queued_ms: float = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class ImageProgress:
    """A progress line of an import or pull."""

    phase: str = ""
    layer: Optional[int] = None
    layers: Optional[int] = None
    bytes: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class BatchCreateResult:
    """What a batch create made, and an error per sandbox it could not make."""

    sandboxes: List[Any]
    errors: List[Any]
