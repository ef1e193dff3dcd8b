"""When a failed call is sent again, and after how long."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, FrozenSet, Optional

from .errors import TransportError, WarrenError


@dataclass
class Retry:
    """Retries of calls answered ``resource_exhausted`` or ``unavailable`` (or never answered).

    A call is retried only when it is safe to send twice: reads, deletes, pause/resume, and any
    call with a ``request_id`` (the server runs it once). ``unsafe=True`` retries the rest too.
    Waits grow from ``initial_s`` by ``multiplier`` to at most ``max_s``, with jitter.
    ``Retry(attempts=1)`` never retries.
    """

    attempts: int = 4
    initial_s: float = 0.2
    max_s: float = 5.0
    multiplier: float = 2.0
    codes: FrozenSet[str] = field(default_factory=lambda: frozenset({"resource_exhausted", "unavailable"}))
    unsafe: bool = False
    #: Injected for tests: the clock the waits run on (the blocking client's, then asyncio's).
    sleep: Callable[[float], None] = time.sleep
    async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    jitter: Callable[[], float] = random.random

    def delay(self, attempt: int, error: WarrenError, idempotent: bool) -> Optional[float]:
        """Seconds to wait before attempt ``attempt + 1``, or None: give up and raise."""
        if attempt >= self.attempts or error.code not in self.codes:
            return None
        if not (idempotent or self.unsafe or (isinstance(error, TransportError) and error.details.get("sent") is False)):
            return None
        hinted = error.details.get("retryAfterMs")
        if isinstance(hinted, (int, float)) and hinted >= 0:
            return min(float(hinted) / 1000, self.max_s)
        base = min(self.initial_s * self.multiplier ** (attempt - 1), self.max_s)
        return base * (0.5 + self.jitter() / 2)


NO_RETRY = Retry(attempts=1)
