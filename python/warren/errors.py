"""Errors: one class per API error code, all under WarrenError (the codes, their statuses and
classes are generated from the contract by ``node scripts/gen-python.mjs``).

The server answers an error as ``{"error": {"code", "message", "details"}}`` with the code's HTTP
status; :func:`error_from_wire` rebuilds the matching class. A call that never reached the server
(refused, reset, timed out) raises :class:`TransportError`, which is a WarrenError with the code
``unavailable`` but no status.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class WarrenError(Exception):
    """An error of the Warren API: ``code`` (stable), ``message``, ``details``, ``status``."""

    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        details: Optional[Mapping[str, Any]] = None,
        status: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details: Dict[str, Any] = dict(details or {})
        self.status: Optional[int] = status if status is not None else STATUS_BY_CODE.get(self.code)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


# --- generated from the API contract by scripts/gen-python.mjs: do not edit by hand ---
STATUS_BY_CODE: Dict[str, int] = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "conflict": 409,
    "payload_too_large": 413,
    "resource_exhausted": 429,
    "deadline_exceeded": 504,
    "unavailable": 503,
    "internal": 500,
}


class InvalidArgumentError(WarrenError):
    code = "invalid_argument"


class UnauthenticatedError(WarrenError):
    code = "unauthenticated"


class PermissionDeniedError(WarrenError):
    code = "permission_denied"


class NotFoundError(WarrenError):
    code = "not_found"


class ConflictError(WarrenError):
    code = "conflict"


class PayloadTooLargeError(WarrenError):
    code = "payload_too_large"


class ResourceExhaustedError(WarrenError):
    code = "resource_exhausted"


class DeadlineExceededError(WarrenError):
    code = "deadline_exceeded"


class UnavailableError(WarrenError):
    code = "unavailable"


class InternalError(WarrenError):
    code = "internal"


ERROR_CLASSES: Dict[str, Type[WarrenError]] = {
    c.code: c
    for c in (
        InvalidArgumentError,
        UnauthenticatedError,
        PermissionDeniedError,
        NotFoundError,
        ConflictError,
        PayloadTooLargeError,
        ResourceExhaustedError,
        DeadlineExceededError,
        UnavailableError,
        InternalError,
    )
}
# --- end of the generated part ---


class TransportError(UnavailableError):
    """The server could not be reached, or the connection broke before a whole answer came."""

    def __init__(self, message: str, *, cause: Optional[BaseException] = None) -> None:
        super().__init__(message, status=None)
        self.status = None
        self.__cause__ = cause


class SandboxEndedError(UnavailableError):
    """A command cut off because its sandbox ended: not its own exit nor its timeout (those answer
    with ``timed_out`` / ``killed_by``). ``end`` says why and whose doing it was (``end["by"]``:
    "agent", "operator" or "platform"), so a reward need not count the platform's failures."""

    def __init__(self, end: Dict[str, Any], *, cause: Optional[BaseException] = None) -> None:
        detail = f" ({end['detail']})" if end.get("detail") else ""
        super().__init__(f"the sandbox ended: {end.get('reason')}{detail}", details={"end": end})
        self.end = end
        self.__cause__ = cause


def error_from_wire(status: Optional[int], body: Any) -> WarrenError:
    """The error an answer carries: by its ``code``, else by its HTTP status."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        e = body["error"]
        code = e.get("code")
        if isinstance(code, str) and code in ERROR_CLASSES:
            message = e.get("message") if isinstance(e.get("message"), str) else code
            details = e.get("details") if isinstance(e.get("details"), dict) else {}
            return ERROR_CLASSES[code](message, details=details, status=status)
    by_status = next((c for c, s in STATUS_BY_CODE.items() if s == status), "internal")
    return ERROR_CLASSES[by_status](f"HTTP {status}", status=status)
