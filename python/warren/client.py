"""The blocking client: :class:`Warren` and the handles it gives out."""

from __future__ import annotations

import json
import tempfile
import time
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import _wire as w
from ._ndjson import LineSplitter
from ._sse import SseSplitter
from ._retry import Retry
from ._endpoint import Endpoint
from ._sync_http import SyncTransport
from ._tarsafe import DEFAULT_MAX_BYTES, extract_safely, pack_dir
from ._turns import Turns
from .errors import NotFoundError, SandboxEndedError, UnavailableError, WarrenError, error_from_wire
from .leases import Lease, Leases
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
    from_wire,
)

class Warren:
    """A Warren server. ``url`` and ``api_key`` default to ``WARREN_URL`` and ``WARREN_API_KEY``.

    ``timeout`` bounds each call's wait for an answer (a command's own timeout is added for
    exec); ``retry`` says which failures are sent again (see :class:`Retry`).
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 120.0,
        retry: Optional[Retry] = None,
        max_idle_connections: int = 32,
    ) -> None:
        self._t = SyncTransport(Endpoint.resolve(url, api_key), timeout=timeout, retry=retry or Retry(), max_idle=max_idle_connections)
        self.url = self._t.e.url
        self.sandboxes = Sandboxes(self._t)
        self.batch = Batch(self._t)
        self.fn = Fn(self._t)
        self.images = Images(self._t)
        self.snapshots = Snapshots(self._t)
        self.layers = Layers(self._t)
        self.pools = Pools(self._t)
        self.keys = Keys(self._t)
        self.leases = Leases(self._t)

    def lease(self, ttl: int, *, on_expiry: Optional[str] = None, labels: Optional[Mapping[str, str]] = None) -> Lease:
        """Takes a lease renewed from a background thread: ``with w.lease(ttl=30) as lease:`` and
        create sandboxes with ``lease=lease``; leaving the block deletes it and its sandboxes. A
        process killed meanwhile (even by SIGKILL) leaves none running past the TTL."""
        return self.leases.create(ttl, on_expiry=on_expiry, labels=labels)

    def events(self, *, since: Optional[int] = None, labels: Optional[Mapping[str, str]] = None) -> Iterator[Dict[str, Any]]:
        """The tenant's lifecycle events as they happen (created, started, paused, resumed, ended
        with its end, lease_lapsed), each a dict with its ``seq``: read again with ``since`` the last
        ``seq`` seen, it misses nothing kept (two hours). Runs until the loop stops reading."""
        q = [("since", str(since))] if since is not None else []
        q += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        with self._t.stream(w.route("events", query=q, accept="text/event-stream")) as chunks:
            sp = SseSplitter()
            for chunk in chunks:
                for _id, _event, data in sp.feed(chunk):
                    yield json.loads(data)

    def info(self) -> Dict[str, Any]:
        return self._t.call(w.route("info", idempotent=True))  # type: ignore[no-any-return]

    def nodes(self) -> List[Dict[str, Any]]:
        """The nodes: capacity, what their sandboxes requested, what admission counts, what they use."""
        return self._t.call(w.route("listNodes", idempotent=True))["nodes"]  # type: ignore[no-any-return]

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> "Warren":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sandboxes:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def create(self, image: Optional[str] = None, **opts: Any) -> "Sandbox":
        """Creates a sandbox. Options as the API's, in Python names: ``layers``, ``resources``
        (``{"cpu": 1, "memoryMiB": 1024, "cpuClass": "batch"}``), ``lifetime`` or ``ttl_seconds``, ``network``, ``env``,
        ``user``, ``workdir``, ``files`` (``{path: str | bytes}``), ``labels``, ``request_id``,
        ``lease`` (a :class:`Lease` or its id).
        With a ``request_id``, a retried create makes one sandbox."""
        body = w.create_body(image, **opts)
        req = w.route("createSandbox", json=body, idempotent="requestId" in body)
        return Sandbox(self._t, SandboxInfo.of(self._t.call(req)))

    def batch_create(self, count: int, template: Mapping[str, Any]) -> BatchCreateResult:
        """Creates ``count`` sandboxes of one template; what failed comes back as errors, not raised."""
        tpl = dict(template)
        body = {"count": count, "template": w.create_body(tpl.pop("image", None), **tpl)}
        r = self._t.call(w.route("batchCreate", json=body))
        return BatchCreateResult(
            sandboxes=[Sandbox(self._t, SandboxInfo.of(s)) for s in r["sandboxes"]],
            errors=[error_from_wire(None, {"error": e}) for e in r["errors"]],
        )

    def get(self, sandbox_id: str) -> "Sandbox":
        """A handle on a sandbox by id, from any process."""
        return Sandbox(self._t, SandboxInfo.of(self._t.call(w.route("getSandbox", sandbox_id, idempotent=True))))

    def list(
        self, *, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None, page_size: int = 500
    ) -> List["Sandbox"]:
        """Every sandbox with all these labels (and in this state), paging through the server's pages."""
        return list(self.iter(labels=labels, state=state, page_size=page_size))

    def iter(
        self, *, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None, page_size: int = 500
    ) -> Iterator["Sandbox"]:
        cursor: Optional[str] = None
        while True:
            q = w.list_query(labels, state, page_size, cursor)
            r = self._t.call(w.route("listSandboxes", query=q, idempotent=True))
            for s in r["sandboxes"]:
                yield Sandbox(self._t, SandboxInfo.of(s))
            cursor = r.get("nextCursor")
            if not cursor:
                return


class Batch:
    """Operations on every sandbox with all the given labels; each returns how many it touched."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def _op(self, op: str, labels: Mapping[str, str]) -> int:
        return int(self._t.call(w.route(w.BATCH_ROUTES[op], json={"labels": dict(labels)}, idempotent=True))["count"])

    def pause(self, labels: Mapping[str, str]) -> int:
        return self._op("pause", labels)

    def resume(self, labels: Mapping[str, str]) -> int:
        return self._op("resume", labels)

    def delete(self, labels: Mapping[str, str]) -> int:
        return self._op("delete", labels)


class Sandbox:
    """A handle on one sandbox; any handle on the same id works the same (state is on the server).
    As a context manager, the sandbox is deleted on exit."""

    def __init__(self, t: SyncTransport, info: SandboxInfo) -> None:
        self._t = t
        self.info = info
        self.files = SandboxFiles(t, info.id)

    @property
    def id(self) -> str:
        return self.info.id

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.info.state!r})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def _info(self, req: w.Request) -> SandboxInfo:
        self.info = SandboxInfo.of(self._t.call(req))
        return self.info

    def refresh(self) -> SandboxInfo:
        return self._info(w.route("getSandbox", self.id, idempotent=True))

    def exec(self, cmd: w.Cmd, **opts: Any) -> ExecResult:
        """Runs a command to its end: a shell string, or an argv list. Options: ``timeout_ms``,
        ``cwd``, ``env``, ``user``, ``stdin``, ``max_output_bytes``, ``keep_output``
        (``"first"`` or ``"last"``: which output ``max_output_bytes`` keeps), ``request_id``."""
        body = w.exec_body(cmd, **opts)
        try:
            return from_wire(ExecResult, self._t.call(w.exec_request(self.id, body, stream=False)))
        except UnavailableError as e:
            raise self._ended_or(e) from e

    def exec_stream(self, cmd: w.Cmd, **opts: Any) -> Iterator[ExecEvent]:
        """Runs a command and yields its events as they come: start, stdout, stderr, exit. A command
        its sandbox's end cut off raises :class:`SandboxEndedError` after its last output."""
        body = w.exec_body(cmd, **opts)
        for obj in self._t.lines(w.exec_request(self.id, body, stream=True)):
            ev = w.event(obj)
            try:
                w.raise_if_error(ev)
            except UnavailableError as e:
                raise self._ended_or(e) from e
            yield ev

    def _ended_or(self, e: UnavailableError) -> UnavailableError:
        """``e``, or the :class:`SandboxEndedError` it stands for (the sandbox's end, as its node reports it within seconds)."""
        deadline = time.monotonic() + w.END_WAIT_S
        while True:
            try:
                end = self.refresh().end
            except WarrenError:
                return e
            if end:
                return SandboxEndedError(end, cause=e)
            if time.monotonic() > deadline:
                return e
            time.sleep(0.1)

    def exec_background(self, cmd: w.Cmd, **opts: Any) -> "Command":
        """Starts a command and returns once it runs; read it later with the handle's reattach or wait."""
        body = w.exec_body(cmd, **opts)
        with self._t.stream(w.exec_request(self.id, body, stream=True)) as chunks:
            sp = LineSplitter()
            for chunk in chunks:
                for obj in sp.feed(chunk):
                    ev = w.event(obj)
                    w.raise_if_error(ev)
                    if ev.type == "start" and ev.command_id:
                        return Command(self, ev.command_id)
        raise WarrenError("the command's stream ended before it started", code="unavailable")

    def command(self, command_id: str) -> "Command":
        """A handle on a command started before (from any process)."""
        return Command(self, command_id)

    def shell(self, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None, user: Optional[str] = None) -> "Shell":
        """A shell session whose cwd, variables and functions persist from one command to the next."""
        body = w.drop_none({"cwd": cwd, "env": dict(env) if env is not None else None, "user": user})
        sid = self._t.call(w.route("createSession", self.id, json=body))["sessionId"]
        return Shell(self, sid)

    def pause(self) -> None:
        self._t.call(w.route("pause", self.id, idempotent=True))

    def resume(self) -> None:
        self._t.call(w.route("resume", self.id, idempotent=True))

    def set_timeout(self, ttl_seconds: int) -> SandboxInfo:
        """The sandbox expires ``ttl_seconds`` from now."""
        return self._info(w.route("setTimeout", self.id, json={"ttlSeconds": ttl_seconds}, idempotent=True))

    def set_network(self, policy: Mapping[str, Any]) -> SandboxInfo:
        """Replaces the sandbox's network rules; its new connections follow them at once."""
        return self._info(w.route("setNetwork", self.id, json=w.wire_keys(policy), idempotent=True))

    def fork(self, count: int = 1, **opts: Any) -> BatchCreateResult:
        """``count`` new sandboxes with this one's files now (a microVM's memory too); it may be
        running or paused and runs on. Options: ``labels``, ``lifetime`` or ``ttl_seconds``,
        ``lease``, ``resources``. What could not be made comes back as errors, not raised."""
        r = self._t.call(w.route("forkSandbox", self.id, json=w.fork_body(count, **opts)))
        return BatchCreateResult(
            sandboxes=[Sandbox(self._t, SandboxInfo.of(s)) for s in r["sandboxes"]],
            errors=[error_from_wire(None, {"error": e}) for e in r["errors"]],
        )

    def snapshot(self, name: Optional[str] = None) -> Image:
        """Keeps this sandbox's files now as a snapshot that outlives it; ``sandboxes.create(snapshot=name)`` starts from it."""
        body = {"name": name} if name is not None else {}
        return from_wire(Image, self._t.call(w.route("createSnapshot", self.id, json=body, timeout=3600)))

    def commit(self, name: str, *, exclude: Optional[Sequence[str]] = None) -> Image:
        """The writable layer as a new layer over the current ones: the image ``name``."""
        body = w.drop_none({"name": name, "exclude": list(exclude) if exclude is not None else None})
        return from_wire(Image, self._t.call(w.route("commit", self.id, json=body, timeout=3600)))

    def screen(self) -> bytes:
        """A full VM's screen now, as PNG bytes (backend ``vm``)."""
        return self._t.raw(w.route("screen", self.id, accept="image/png", idempotent=True))

    def input(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Keys, text and mouse events to a full VM's display, in order (backend ``vm``), e.g.
        ``[{"type": "mouse", "x": 10, "y": 20, "button": "left"}, {"type": "text", "text": "ls"}, {"type": "key", "key": "Return"}]``."""
        self._t.call(w.route("input", self.id, json={"events": [dict(e) for e in events]}))

    def delete(self) -> None:
        """Stops and removes the sandbox (idempotent)."""
        self._t.call(w.route("deleteSandbox", self.id, idempotent=True))


class Command:
    """A command that runs on in its sandbox whatever happens to the connection that started it."""

    def __init__(self, sandbox: Sandbox, command_id: str) -> None:
        self.sandbox = sandbox
        self.id = command_id

    @property
    def command_id(self) -> str:
        return self.id

    def reattach(self, offset: int = 0) -> Iterator[ExecEvent]:
        """Its events from byte ``offset`` of its output (stdout and stderr together) to its end."""
        for obj in self.sandbox._t.lines(w.attach_request(self.sandbox.id, self.id, offset)):
            ev = w.event(obj)
            w.raise_if_error(ev)
            yield ev

    def wait(self) -> ExecResult:
        """Waits for its end; its whole output, as exec answers."""
        b = w.ResultBuilder(self.id)
        for ev in self.reattach(0):
            b.add(ev)
        return b.finish()

    def kill(self, signal: str = "SIGTERM") -> None:
        self.sandbox._t.call(w.route("killCommand", self.sandbox.id, self.id, json={"signal": signal}, idempotent=True))

    def write_stdin(self, data: Union[str, bytes], *, eof: bool = False) -> None:
        self.sandbox._t.call(w.route("commandStdin", self.sandbox.id, self.id, query=[("eof", "1")] if eof else [], body=data))


class Shell:
    """A persistent shell in a sandbox. As a context manager, it is closed on exit.

    Its commands run one at a time, in the order they were called (from any thread): each is
    sent once the one before it has its place on the server, which queues them (see _turns).
    A command's ``timeout_ms`` counts from its start, not from its wait for its turn.
    """

    def __init__(self, sandbox: Sandbox, session_id: str) -> None:
        self.sandbox = sandbox
        self.id = session_id
        self._turns = Turns()

    def exec(self, cmd: w.Cmd, **opts: Any) -> ExecResult:
        t = self._turns.take()
        try:
            self._turns.wait(t)
            return self.sandbox.exec(cmd, session=self.id, **opts)
        finally:
            self._turns.give_back(t)

    def exec_stream(self, cmd: w.Cmd, **opts: Any) -> Iterator[ExecEvent]:
        """Its place in the order is taken when the stream is first read."""
        t = self._turns.take()
        try:
            self._turns.wait(t)
            for ev in self.sandbox.exec_stream(cmd, session=self.id, **opts):
                # The first event says the server has it: the next command may go.
                self._turns.give_back(t)
                yield ev
        finally:
            self._turns.give_back(t)

    def close(self) -> None:
        self.sandbox._t.call(w.route("deleteSession", self.sandbox.id, self.id, idempotent=True))

    def __enter__(self) -> "Shell":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SandboxFiles:
    """Files in a sandbox; every path is inside it and nothing resolves outside it."""

    def __init__(self, t: SyncTransport, sandbox_id: str) -> None:
        self._t = t
        self._id = sandbox_id


    def read(self, path: str) -> bytes:
        return self._t.raw(w.route("readFile", self._id, query=[("path", path)], accept="*/*", idempotent=True))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[str, bytes, IO[bytes]], *, mode: Optional[int] = None) -> None:
        """Writes a file (its parents made); ``mode`` is numeric, e.g. ``0o755``."""
        q = [("path", path)] + w.file_mode(mode)
        self._t.call(w.route("writeFile", self._id, query=q, body=data, idempotent=not hasattr(data, "read")))

    def list(self, path: str, depth: int = 1) -> List[FileEntry]:
        q = [("path", path), ("depth", str(depth))]
        r = self._t.call(w.route("listFiles", self._id, query=q, idempotent=True))
        return [from_wire(FileEntry, e) for e in r["entries"]]

    def stat(self, path: str) -> FileEntry:
        return from_wire(FileEntry, self._t.call(w.route("statFile", self._id, query=[("path", path)], idempotent=True)))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def remove(self, path: str, *, recursive: bool = False) -> None:
        q = [("path", path)] + ([("recursive", "1")] if recursive else [])
        self._t.call(w.route("deleteFile", self._id, query=q, idempotent=True))

    def mkdir(self, path: str) -> None:
        self._t.call(w.route("mkdir", self._id, json={"path": path}, idempotent=True))

    def move(self, src: str, dst: str) -> None:
        self._t.call(w.route("move", self._id, json={"from": src, "to": dst}))

    def put_archive(self, path: str, tar: Union[bytes, IO[bytes]]) -> None:
        """Extracts a tar into the directory ``path`` in the sandbox."""
        self._t.call(w.route("putArchive", self._id, query=[("path", path)], body=tar, content_type="application/x-tar"))

    def get_archive(self, path: str, out: IO[bytes], *, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
        """Writes a tar of the sandbox's directory ``path`` to ``out``; at most ``max_bytes``."""
        n = 0
        req = w.route("getArchive", self._id, query=[("path", path)], accept="application/x-tar", idempotent=True)
        with self._t.stream(req) as chunks:
            for chunk in chunks:
                n += len(chunk)
                if n > max_bytes:
                    raise WarrenError(f"the archive passed {max_bytes} bytes", code="payload_too_large")
                out.write(chunk)
        return n

    def upload_dir(self, local: str, remote: str) -> None:
        """Copies the local directory's contents into ``remote`` in the sandbox (tar underneath)."""
        with tempfile.TemporaryFile() as f:
            pack_dir(local, f)
            self.put_archive(remote, f)

    def download_dir(self, remote: str, local: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
        """Copies the sandbox's directory ``remote`` into ``local``; returns the file bytes written.
        Links out of ``local``, ``..`` names and device nodes in the archive are refused."""
        with tempfile.TemporaryFile() as f:
            self.get_archive(remote, f, max_bytes=max_bytes)
            f.seek(0)
            return extract_safely(f, local, max_bytes=max_bytes)


class Fn:
    """FnCall: short stateless calls (python, bash, node) in warm workers."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def run(self, language: str, code: str, **opts: Any) -> FnResult:
        """One call. Options: ``stdin``, ``timeout_ms``, ``image``, ``files``, ``env``, ``cwd``,
        ``resources``, ``max_output_bytes``."""
        return from_wire(FnResult, self._t.call(w.route("fnRun", json=w.fn_body(language, code, **opts), timeout=w.fn_timeout(opts))))

    def batch(self, calls: Sequence[Mapping[str, Any]]) -> List[Union[FnResult, WarrenError]]:
        """Many calls, answered in their order; a call that could not run is its error (not raised)."""
        body = {"calls": [w.fn_body(**c) for c in calls]}
        r = self._t.call(w.route("fnBatch", json=body, timeout=w.fn_timeout({"timeout_ms": 15 * 60_000})))
        return [w.fn_outcome(x) for x in r["results"]]


class Snapshots:
    """The tenant's snapshots (``Sandbox.snapshot``): images that outlive their sandbox."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def list(self, *, sandbox: Optional[str] = None, name: Optional[str] = None) -> List[Image]:
        """Newest first; ``sandbox``: only those of one sandbox."""
        q = [(k, v) for k, v in (("sandbox", sandbox), ("name", name)) if v is not None]
        return [from_wire(Image, i) for i in (self._t.call(w.route("listSnapshots", query=q, idempotent=True)))["snapshots"]]

    def delete(self, name: str, *, force: bool = False) -> None:
        """Refused (ConflictError) while live sandboxes were created from it, unless ``force``."""
        q = [("force", "1")] if force else []
        self._t.call(w.route("deleteSnapshot", name, query=q, idempotent=True))


class Images:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def list(self) -> List[Image]:
        return [from_wire(Image, i) for i in self._t.call(w.route("listImages", idempotent=True))["images"]]

    def import_tar(self, path: str, *, name: str, on_progress: Optional[Callable[[ImageProgress], None]] = None) -> Image:
        """Imports a ``docker save`` or OCI image layout tarball (gzip allowed) as image ``name``."""
        with open(path, "rb") as f:
            req = w.route("importImage", query=[("name", name)], body=f, content_type="application/x-tar", accept="application/x-ndjson")
            return w.image_result(self._t.lines(req), on_progress)

    def pull(self, ref: str, *, name: Optional[str] = None, auth: Optional[Mapping[str, str]] = None, on_progress: Optional[Callable[[ImageProgress], None]] = None) -> Image:
        """Pulls an image from an OCI registry (``host:port/repo:tag``)."""
        body = w.drop_none({"ref": ref, "name": name, "auth": dict(auth) if auth else None})
        return w.image_result(self._t.lines(w.route("pullImage", json=body, accept="application/x-ndjson")), on_progress)

    def delete(self, name: str, *, force: bool = False) -> None:
        """Refused (ConflictError) while live sandboxes were created from it, unless ``force``: they keep its layers while they live."""
        q = [("force", "1")] if force else []
        self._t.call(w.route("deleteImage", name, query=q, idempotent=True))


class Layers:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def upload(self, name: str, tar: Union[bytes, IO[bytes]]) -> Layer:
        """A layer tar (gzip allowed; OCI whiteouts honoured), usable in ``layers`` at create."""
        return from_wire(Layer, self._t.call(w.route("uploadLayer", query=[("name", name)], body=tar, content_type="application/x-tar")))

    def list(self) -> List[Layer]:
        return [from_wire(Layer, x) for x in self._t.call(w.route("listLayers", idempotent=True))["layers"]]

    def publish(self, to: str, *, image: Optional[str] = None, layers: Optional[Sequence[str]] = None, auth: Optional[Mapping[str, str]] = None) -> List[Dict[str, Any]]:
        body = w.drop_none({"to": to, "image": image, "layers": list(layers) if layers else None, "auth": dict(auth) if auth else None})
        return self._t.call(w.route("publishLayers", json=body, idempotent=True))["layers"]  # type: ignore[no-any-return]

    def delete(self, name: str) -> None:
        self._t.call(w.route("deleteLayer", name, idempotent=True))


class Pools:
    """Warm pools: sandboxes of one spec kept ready; matching creates claim them."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def create(self, image: str, size: int, **opts: Any) -> Pool:
        return from_wire(Pool, self._t.call(w.route("createPool", json=w.pool_body(image, size, **opts))))

    def list(self) -> List[Pool]:
        return [from_wire(Pool, p) for p in self._t.call(w.route("listPools", idempotent=True))["pools"]]

    def delete(self, pool_id: str) -> None:
        self._t.call(w.route("deletePool", pool_id, idempotent=True))


class Keys:
    """API keys (admin keys only)."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def create(self, tenant: str, **opts: Any) -> Dict[str, Any]:
        """A new key for ``tenant`` (``role``, ``quota``): ``{"key", "keyId", "tenant", "role"}``.
        The key is shown once."""
        return self._t.call(w.route("createKey", json=w.key_body(tenant, **opts)))  # type: ignore[no-any-return]

    def revoke(self, key_id: str) -> None:
        self._t.call(w.route("deleteKey", key_id, idempotent=True))
