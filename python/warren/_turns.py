"""The order a shell's commands are sent in: the order they were called.

The server runs a session's commands one at a time, in the order they reach it; calls made at
once go on different connections (and through the server's own hops to the node), so they may
reach it in another order than they were made. A shell therefore sends each command once the
one called before it was taken: answered (``exec``), or its first event read (``exec_stream``:
the server sends it as soon as the command has its place). Only the sending waits; the server
holds the queue.

Each call takes a ticket and gives it back when its command was taken (or it gave up): ticket n
is sent once every ticket before it was given back, whatever order they are given back in.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Dict, Set


class _Book:
    """Tickets given out and given back; the turn is the lowest one not given back yet."""

    def __init__(self) -> None:
        self.given = 0
        self.turn = 0
        self.back: Set[int] = set()

    def take(self) -> int:
        t = self.given
        self.given += 1
        return t

    def give_back(self, t: int) -> bool:
        """True when the turn moved on."""
        if t < self.turn or t in self.back:
            return False
        self.back.add(t)
        moved = False
        while self.turn in self.back:
            self.back.discard(self.turn)
            self.turn += 1
            moved = True
        return moved


class Turns:
    """Tickets for threads (the blocking client's shell)."""

    def __init__(self) -> None:
        self._book = _Book()
        self._cv = threading.Condition()

    def take(self) -> int:
        with self._cv:
            return self._book.take()

    def wait(self, t: int) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self._book.turn >= t)

    def give_back(self, t: int) -> None:
        with self._cv:
            if self._book.give_back(t):
                self._cv.notify_all()


class AsyncTurns:
    """Tickets for one event loop's tasks (the asyncio client's shell); a cancelled wait gives its ticket back in order."""

    def __init__(self) -> None:
        self._book = _Book()
        self._waiting: Dict[int, "asyncio.Future[None]"] = {}

    def take(self) -> int:
        return self._book.take()

    async def wait(self, t: int) -> None:
        if self._book.turn >= t:
            return
        # Made in the loop that waits (a client may be made before asyncio.run, or used by several).
        fut: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._waiting[t] = fut
        try:
            await fut
        finally:
            self._waiting.pop(t, None)

    def give_back(self, t: int) -> None:
        if self._book.give_back(t):
            for n, fut in self._waiting.items():
                if n <= self._book.turn and not fut.done():
                    fut.set_result(None)
