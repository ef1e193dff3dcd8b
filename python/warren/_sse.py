"""Server-sent events: a stream of byte chunks to events (fields per line, a blank line ends one,
``:`` lines are comments), with a bound on what one event holds."""

from __future__ import annotations

from typing import List, Optional, Tuple

from .errors import WarrenError

#: The most one event may hold (lifecycle events are far smaller).
MAX_EVENT_BYTES = 1024 * 1024


class SseSplitter:
    """Feeds chunks; answers the events complete so far as ``(id, event, data)``."""

    def __init__(self, max_event: int = MAX_EVENT_BYTES) -> None:
        self.buf = bytearray()
        self.max_event = max_event
        self.id: Optional[str] = None
        self.event = "message"
        self.data: List[str] = []

    def feed(self, chunk: bytes) -> List[Tuple[Optional[str], str, str]]:
        self.buf += chunk
        out: List[Tuple[Optional[str], str, str]] = []
        start = 0
        while True:
            nl = self.buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(self.buf[start:nl]).decode("utf-8").rstrip("\r")
            start = nl + 1
            if line == "":
                if self.data:
                    out.append((self.id, self.event, "\n".join(self.data)))
                self.id, self.event, self.data = None, "message", []
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "data":
                    self.data.append(value)
                elif field == "id":
                    self.id = value
                elif field == "event":
                    self.event = value
        del self.buf[:start]
        if len(self.buf) + sum(len(d) for d in self.data) > self.max_event:
            raise WarrenError(f"a server-sent event passed {self.max_event} bytes", code="payload_too_large")
        return out
