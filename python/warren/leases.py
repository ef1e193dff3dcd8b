"""Leases: sandboxes made with one live only while it is renewed, so a trainer that dies (even by
SIGKILL) leaves nothing running past the lease's TTL.

    with w.lease(ttl=30) as lease:            # renewed from a background thread
        sb = w.sandboxes.create("debian-python:latest", lease=lease)
        ...                                   # on exit the lease is deleted, and its sandboxes with it
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from . import _wire as w
from .errors import ConflictError, NotFoundError

if TYPE_CHECKING:
    from ._async_http import AsyncTransport
    from ._sync_http import SyncTransport


def lease_body(ttl: int, on_expiry: Optional[str] = None, labels: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    return w.drop_none({"ttlSeconds": ttl, "onExpiry": on_expiry, "labels": dict(labels) if labels is not None else None})


def _every(info: Mapping[str, Any]) -> float:
    """Seconds between renewals, and the longest a renewal may take: a third of the TTL."""
    return max(0.1, float(info["ttlSeconds"]) / 3)


class Lease:
    """A lease (``id``, ``info``: the API's object as last read). A context manager: renewed in the
    background while the block runs, deleted (with its sandboxes) when it ends."""

    def __init__(self, t: "SyncTransport", info: Dict[str, Any]) -> None:
        self._t = t
        self.info = info
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def id(self) -> str:
        return str(self.info["id"])

    def renew(self, ttl: Optional[int] = None, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Moves its deadline ``ttl`` seconds (default its own TTL) from now; ConflictError once it lapsed.
        ``timeout`` bounds the wait (the background renewer gives each try a third of the TTL)."""
        req = w.route("renewLease", self.id, json=w.drop_none({"ttlSeconds": ttl}), idempotent=True, timeout=timeout)
        self.info = self._t.call(req)
        return self.info

    def keep_alive(self) -> None:
        """Renews it from a daemon thread every third of its TTL until :meth:`stop` or :meth:`delete`."""
        if self._thread is not None:
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(_every(self.info)):
                try:
                    self.renew(timeout=_every(self.info))
                except (ConflictError, NotFoundError):
                    return
                except Exception:  # noqa: BLE001 - tried again at the next turn
                    continue

        self._thread = threading.Thread(target=run, name=f"warren-lease-{self.id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops renewing: the lease lapses at its deadline."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def delete(self) -> None:
        """Ends the lease and every sandbox made with it, at once (idempotent)."""
        self.stop()
        self._t.call(w.route("deleteLease", self.id, idempotent=True))

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()


class Leases:
    def __init__(self, t: "SyncTransport") -> None:
        self._t = t

    def create(self, ttl: int, *, on_expiry: Optional[str] = None, labels: Optional[Mapping[str, str]] = None, keep_alive: bool = True) -> Lease:
        """Takes a lease of ``ttl`` seconds (``on_expiry``: ``"delete"``, the default, or ``"pause"``),
        renewed from a background thread unless ``keep_alive=False``."""
        lease = Lease(self._t, self._t.call(w.route("createLease", json=lease_body(ttl, on_expiry, labels))))
        if keep_alive:
            lease.keep_alive()
        return lease

    def get(self, lease_id: str) -> Lease:
        """A lease by id (from any process), not renewed by this one until :meth:`Lease.keep_alive`."""
        return Lease(self._t, self._t.call(w.route("getLease", lease_id, idempotent=True)))

    def list(self, state: Optional[str] = None) -> List[Dict[str, Any]]:
        return self._t.call(w.route("listLeases", query=[("state", state)] if state else [], idempotent=True))["leases"]  # type: ignore[no-any-return]


class AsyncLease:
    """A lease for asyncio code: ``async with`` renews it from a task and deletes it at the end."""

    def __init__(self, t: "AsyncTransport", info: Dict[str, Any]) -> None:
        self._t = t
        self.info = info
        self._task: Optional["asyncio.Task[None]"] = None

    @property
    def id(self) -> str:
        return str(self.info["id"])

    async def renew(self, ttl: Optional[int] = None, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        req = w.route("renewLease", self.id, json=w.drop_none({"ttlSeconds": ttl}), idempotent=True, timeout=timeout)
        self.info = await self._t.call(req)
        return self.info

    def keep_alive(self) -> None:
        if self._task is not None:
            return

        async def run() -> None:
            while True:
                await asyncio.sleep(_every(self.info))
                try:
                    await self.renew(timeout=_every(self.info))
                except (ConflictError, NotFoundError):
                    return
                except Exception:  # noqa: BLE001 - tried again at the next turn
                    continue

        self._task = asyncio.get_running_loop().create_task(run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._task = None

    async def delete(self) -> None:
        await self.stop()
        await self._t.call(w.route("deleteLease", self.id, idempotent=True))

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()


class AsyncLeases:
    def __init__(self, t: "AsyncTransport") -> None:
        self._t = t

    async def create(self, ttl: int, *, on_expiry: Optional[str] = None, labels: Optional[Mapping[str, str]] = None, keep_alive: bool = True) -> AsyncLease:
        lease = AsyncLease(self._t, await self._t.call(w.route("createLease", json=lease_body(ttl, on_expiry, labels))))
        if keep_alive:
            lease.keep_alive()
        return lease

    async def get(self, lease_id: str) -> AsyncLease:
        return AsyncLease(self._t, await self._t.call(w.route("getLease", lease_id, idempotent=True)))

    async def list(self, state: Optional[str] = None) -> List[Dict[str, Any]]:
        return (await self._t.call(w.route("listLeases", query=[("state", state)] if state else [], idempotent=True)))["leases"]  # type: ignore[no-any-return]
