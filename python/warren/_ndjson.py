"""NDJSON: a stream of byte chunks to parsed lines, with a bound on one line's length."""

from __future__ import annotations

import json
from typing import Any, List

from .errors import WarrenError

#: The longest line the client holds (a server's output events are far smaller).
MAX_LINE_BYTES = 64 * 1024 * 1024


class LineSplitter:
    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.buf = bytearray()
        self.max_line = max_line

    def feed(self, chunk: bytes) -> List[Any]:
        self.buf += chunk
        out: List[Any] = []
        start = 0
        while True:
            nl = self.buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(self.buf[start:nl])
            start = nl + 1
            if line.strip():
                out.append(json.loads(line))
        del self.buf[:start]
        if len(self.buf) > self.max_line:
            raise WarrenError(f"a stream line passed {self.max_line} bytes", code="payload_too_large")
        return out

    def end(self) -> List[Any]:
        rest = bytes(self.buf).strip()
        self.buf.clear()
        return [json.loads(rest)] if rest else []
