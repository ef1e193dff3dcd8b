"""Warren's Python client: sandboxes for training and evaluating AI agents.

    from warren import Warren
    w = Warren()                                   # WARREN_URL, WARREN_API_KEY
    with w.sandboxes.create(image="debian-python:latest") as sb:
        print(sb.exec("python3 -c 'print(6*7)'").stdout)

:class:`AsyncWarren` is the same surface for asyncio. Only Python's standard library is used.
"""

from ._retry import NO_RETRY, Retry
from .aio import AsyncCommand, AsyncSandbox, AsyncShell, AsyncWarren
from .client import Command, Sandbox, Shell, Warren
from .errors import (
    ConflictError,
    DeadlineExceededError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    SandboxEndedError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
    WarrenError,
)
from .leases import AsyncLease, Lease
from .types import (
    BatchCreateResult,
    ExecEvent,
    ExecResult,
    FileEntry,
    FnResult,
    Image,
    ImageProgress,
    Layer,
    Pool,
    SandboxInfo,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncCommand",
    "AsyncLease",
    "AsyncSandbox",
    "AsyncShell",
    "AsyncWarren",
    "BatchCreateResult",
    "Command",
    "ConflictError",
    "DeadlineExceededError",
    "ExecEvent",
    "ExecResult",
    "FileEntry",
    "FnResult",
    "Image",
    "ImageProgress",
    "InternalError",
    "InvalidArgumentError",
    "Layer",
    "Lease",
    "NO_RETRY",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Pool",
    "ResourceExhaustedError",
    "Retry",
    "Sandbox",
    "SandboxEndedError",
    "SandboxInfo",
    "Shell",
    "TransportError",
    "UnauthenticatedError",
    "UnavailableError",
    "Warren",
    "WarrenError",
]
