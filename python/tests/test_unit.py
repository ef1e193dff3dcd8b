"""The client's pure parts and its transports against small loopback servers: no Warren needed."""

from __future__ import annotations

import asyncio
import io
import os
import re
import socket
import sys
import tarfile
import tempfile
import threading
import unittest
from typing import List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from warren import AsyncWarren, NotFoundError, ResourceExhaustedError, Retry, TransportError, Warren, WarrenError  # noqa: E402
from warren._ndjson import LineSplitter  # noqa: E402
from warren._sse import SseSplitter  # noqa: E402
from warren._tarsafe import extract_safely  # noqa: E402
from warren._turns import AsyncTurns, Turns  # noqa: E402
from warren._wire import ResultBuilder, create_body, event, route  # noqa: E402
from warren.errors import error_from_wire  # noqa: E402
from warren.types import ExecResult, SandboxInfo, camel, from_wire, snake  # noqa: E402


class Names(unittest.TestCase):
    def test_snake_keeps_a_bounded_memo(self) -> None:
        import warren.types as t

        # A server's keys are not all remembered: past the bound, names are still right, and not kept.
        for i in range(t._SNAKE_MAX + 500):
            self.assertEqual(snake(f"someKey{i}X"), f"some_key{i}_x")
        self.assertLessEqual(len(t._SNAKE), t._SNAKE_MAX)
        self.assertEqual(snake("memoryMiB"), "memory_mib")

    def test_wire_names(self) -> None:
        self.assertEqual([snake(k) for k in ("memoryMiB", "exitCode", "claimsPerSecond", "id")], ["memory_mib", "exit_code", "claims_per_second", "id"])
        self.assertEqual([camel(k) for k in ("memory_mib", "ttl_seconds", "memoryMiB", "cpu")], ["memoryMiB", "ttlSeconds", "memoryMiB", "cpu"])
        r = from_wire(ExecResult, {"commandId": "c", "stdout": "x", "exitCode": 0, "newField": 1})
        self.assertEqual((r.command_id, r.stdout, r.exit_code, r.ok, r.limits_hit), ("c", "x", 0, True, []))
        full = from_wire(ExecResult, {"commandId": "c", "exitCode": 1, "killedBy": None, "limitsHit": ["disk"]})
        self.assertEqual((full.ok, full.killed_by, full.limits_hit), (False, None, ["disk"]))
        b = ResultBuilder("c")
        for ev in ({"type": "stderr", "data": "fork"}, {"type": "exit", "exitCode": 2, "signal": None, "limitsHit": ["pids"]}):
            b.add(event(ev))
        self.assertEqual((b.finish().stderr, b.finish().limits_hit), ("fork", ["pids"]))
        info = SandboxInfo.of({"id": "sb_1", "state": "running", "resources": {"cpu": 1, "memoryMiB": 256, "pids": 64, "diskMiB": None, "cpuClass": "batch"}})
        self.assertEqual((info.resources.memory_mib, info.resources.cpu_class, info.raw["state"]), (256, "batch", "running"))

    def test_create_body(self) -> None:
        b = create_body(
            "img",
            resources={"cpu": 1, "memory_mib": 64, "cpu_class": "batch"},
            files={"/a": "x", "/b": b"\x00"},
            labels={"some_label": "v"},
            env={"MY_VAR": "1"},
            request_id="r",
            ttl_seconds=5,
        )
        self.assertEqual(b["resources"], {"cpu": 1, "memoryMiB": 64, "cpuClass": "batch"})
        self.assertEqual(b["files"], [{"path": "/a", "content": "eA=="}, {"path": "/b", "content": "AA=="}])
        # User data keeps its names.
        self.assertEqual((b["labels"], b["env"]), ({"some_label": "v"}, {"MY_VAR": "1"}))
        self.assertEqual((b["requestId"], b["lifetime"]), ("r", {"ttlSeconds": 5}))
        self.assertNotIn("network", b)

    def test_errors(self) -> None:
        e = error_from_wire(429, {"error": {"code": "resource_exhausted", "message": "full", "details": {"resource": "memory"}}})
        self.assertIsInstance(e, ResourceExhaustedError)
        self.assertEqual((e.code, e.message, e.details, e.status), ("resource_exhausted", "full", {"resource": "memory"}, 429))
        self.assertIsInstance(error_from_wire(404, "not json"), NotFoundError)
        self.assertEqual(error_from_wire(418, None).code, "internal")


class ServerSentEvents(unittest.TestCase):
    def test_split_across_chunks_comments_and_crlf(self) -> None:
        sp = SseSplitter()
        got = []
        for part in [b": hello\n\nid: 1\nevent: crea", b"ted\ndata: {\"a\":\ndata: 1}\n\n", b"id: 2\r\ndata:x\r\n\r\n", b": keepalive\n\n", b"data: cut"]:
            got += sp.feed(part)
        self.assertEqual(got, [("1", "created", '{"a":\n1}'), ("2", "message", "x")])

    def test_an_event_past_the_bound_is_refused(self) -> None:
        sp = SseSplitter(max_event=10)
        with self.assertRaises(WarrenError):
            sp.feed(b"data: " + b"x" * 20)


class Routes(unittest.TestCase):
    def test_a_route_fills_its_path_from_the_contract(self) -> None:
        r = route("killCommand", "sb_1", "cmd/../x", json={"signal": "SIGKILL"})
        self.assertEqual((r.method, r.path), ("POST", "/v1/sandboxes/sb_1/commands/cmd%2F..%2Fx/kill"))
        self.assertEqual(r.json, {"signal": "SIGKILL"})
        self.assertEqual(route("listNodes").path, "/v1/nodes")
        with self.assertRaises(TypeError):
            route("getSandbox", "sb_1", "extra")
        with self.assertRaises(TypeError):
            route("getSandbox")


class Ndjson(unittest.TestCase):
    def test_lines_across_chunks(self) -> None:
        sp = LineSplitter()
        self.assertEqual(sp.feed(b'{"a":1}\n{"b"'), [{"a": 1}])
        self.assertEqual(sp.feed(b':2}\n\n'), [{"b": 2}])
        self.assertEqual(sp.feed(b'{"c":3}'), [])
        self.assertEqual(sp.end(), [{"c": 3}])

    def test_a_line_without_end_is_bounded(self) -> None:
        sp = LineSplitter(max_line=100)
        with self.assertRaises(WarrenError) as cm:
            for _ in range(10):
                sp.feed(b"x" * 50)
        self.assertEqual(cm.exception.code, "payload_too_large")


def _tar(entries: List[tarfile.TarInfo], data: bytes = b"") -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for ti in entries:
            tf.addfile(ti, io.BytesIO(data) if ti.isfile() else None)
    buf.seek(0)
    return buf


def _ti(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.size = size
    ti.linkname = link
    ti.mode = mode
    return ti


class ShellTurns(unittest.TestCase):
    """A shell's commands are sent in the order called, each once the one before was taken."""

    def test_tickets_given_back_out_of_order_keep_the_order(self) -> None:
        async def main() -> List[str]:
            turns = AsyncTurns()
            log: List[str] = []
            gates = {n: asyncio.Event() for n in "abcd"}

            async def call(name: str) -> None:
                t = turns.take()
                try:
                    await turns.wait(t)
                    log.append(name)
                    await gates[name].wait()
                finally:
                    turns.give_back(t)

            tasks = [asyncio.ensure_future(call(n)) for n in "abcd"]
            await asyncio.sleep(0)
            # c gives up before its turn: d still waits for a and b.
            tasks[2].cancel()
            await asyncio.sleep(0)
            self.assertEqual(log, ["a"])
            gates["a"].set()
            for _ in range(3):
                await asyncio.sleep(0)
            self.assertEqual(log, ["a", "b"])
            gates["b"].set()
            gates["d"].set()
            await asyncio.gather(*tasks, return_exceptions=True)
            return log

        self.assertEqual(asyncio.run(main()), ["a", "b", "d"])

    def test_threads(self) -> None:
        turns = Turns()
        order = [turns.take() for _ in range(3)]
        log: List[int] = []

        def call(t: int) -> None:
            turns.wait(t)
            log.append(t)
            turns.give_back(t)

        threads = [threading.Thread(target=call, args=(t,)) for t in reversed(order)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(log, [0, 1, 2])


class SafeTar(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.dest = os.path.join(self.tmp.name, "dest")
        self.outside = os.path.join(self.tmp.name, "outside")
        os.makedirs(self.outside)

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def test_plain_files_dirs_and_inner_links(self) -> None:
        src = _tar([_ti("d", tarfile.DIRTYPE, mode=0o755), _ti("d/f", size=2, mode=0o4755), _ti("d/l", tarfile.SYMTYPE, link="f")], b"hi")
        self.assertEqual(extract_safely(src, self.dest), 2)
        with open(os.path.join(self.dest, "d", "l")) as f:
            self.assertEqual(f.read(), "hi")
        # No set-id bits come out of a sandbox.
        self.assertEqual(os.stat(os.path.join(self.dest, "d", "f")).st_mode & 0o7777, 0o755)

    def test_hostile_entries_are_refused(self) -> None:
        cases = [
            [_ti("../outside/x", size=2)],
            [_ti("/abs", size=2)],
            [_ti("a/../../outside/x", size=2)],
            [_ti("l", tarfile.SYMTYPE, link="/etc")],
            [_ti("l", tarfile.SYMTYPE, link="../outside")],
            # A link inside, then a file written through it to outside.
            [_ti("l", tarfile.SYMTYPE, link="."), _ti("l2", tarfile.SYMTYPE, link="l/../../outside")],
            [_ti("h", tarfile.LNKTYPE, link="../outside/secret")],
        ]
        for entries in cases:
            with self.subTest(names=[e.name for e in entries]):
                with self.assertRaises(WarrenError):
                    extract_safely(_tar(entries, b"xx"), self.dest)
                self.assertEqual(os.listdir(self.outside), [])

    def test_no_write_through_a_link_made_before(self) -> None:
        os.makedirs(self.dest)
        os.symlink(self.outside, os.path.join(self.dest, "out"))
        with self.assertRaises(WarrenError):
            extract_safely(_tar([_ti("out/x", size=2)], b"xx"), self.dest)
        self.assertEqual(os.listdir(self.outside), [])

    def test_devices_left_out_and_size_bounded(self) -> None:
        extract_safely(_tar([_ti("dev", tarfile.CHRTYPE), _ti("fifo", tarfile.FIFOTYPE)]), self.dest)
        self.assertEqual(os.listdir(self.dest), [])
        with self.assertRaises(WarrenError) as cm:
            extract_safely(_tar([_ti("big", size=100)], b"x" * 100), self.dest, max_bytes=99)
        self.assertEqual(cm.exception.code, "payload_too_large")


class _Server:
    """A loopback HTTP server that answers each connection with the next canned bytes."""

    def __init__(self, answers: List[bytes], close_after: bool = True) -> None:
        self.answers = list(answers)
        self.requests: List[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.close_after = close_after
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            req = b""
            while b"\r\n\r\n" not in req:
                req += c.recv(65536)
            self.requests.append(req)
            c.sendall(self.answers.pop(0))
            if self.close_after:
                c.close()

    def close(self) -> None:
        self.sock.close()


def _http(status: int, body: bytes) -> bytes:
    return f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body


BUSY = _http(429, b'{"error":{"code":"resource_exhausted","message":"this node is full","details":{}}}')
OK_LIST = _http(200, b'{"sandboxes":[],"nextCursor":null}')


class Retries(unittest.TestCase):
    def test_idempotent_calls_are_retried_with_backoff_on_an_injected_clock(self) -> None:
        s = _Server([BUSY, BUSY, OK_LIST])
        slept: List[float] = []
        w = Warren(s.url, "k", retry=Retry(attempts=4, initial_s=1, sleep=slept.append, jitter=lambda: 1.0))
        self.assertEqual(w.sandboxes.list(), [])
        self.assertEqual(slept, [1.0, 2.0])
        self.assertEqual(len(s.requests), 3)
        self.assertIn(b"authorization: Bearer k", s.requests[0])
        s.close()

    def test_a_create_without_request_id_is_not_retried_and_one_with_it_is(self) -> None:
        created = _http(201, b'{"id":"sb_1","state":"running"}')
        s = _Server([BUSY, BUSY, created])
        slept: List[float] = []
        w = Warren(s.url, "k", retry=Retry(sleep=slept.append))
        with self.assertRaises(ResourceExhaustedError):
            w.sandboxes.create(image="busybox:latest")
        self.assertEqual(slept, [])
        self.assertEqual(w.sandboxes.create(image="busybox:latest", request_id="once").id, "sb_1")
        self.assertEqual(len(slept), 1)
        s.close()

    def test_async_retries_on_its_own_clock(self) -> None:
        s = _Server([BUSY, OK_LIST])
        slept: List[float] = []

        async def fake_sleep(d: float) -> None:
            slept.append(d)

        async def main() -> None:
            async with AsyncWarren(s.url, "k", retry=Retry(async_sleep=fake_sleep)) as w:
                self.assertEqual(await w.sandboxes.list(), [])

        asyncio.run(main())
        self.assertEqual(len(slept), 1)
        s.close()


class _KeptServer:
    """A loopback HTTP server that keeps connections: each request read gets the next step, an
    answer (kept alive, its Keep-Alive timeout ``keep``) or None (the connection closed unanswered)."""

    def __init__(self, steps: List[Optional[bytes]], keep: int = 60) -> None:
        self.steps = list(steps)
        self.keep = keep
        self.requests: List[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        buf = b""
        with c:
            while self.steps:
                while b"\r\n\r\n" not in buf:
                    got = c.recv(65536)
                    if not got:
                        return
                    buf += got
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1)) if re.search(rb"content-length", head, re.I) else 0
                while len(buf) < length:
                    buf += c.recv(65536)
                buf = buf[length:]
                self.requests.append(head)
                step = self.steps.pop(0)
                if step is None:
                    return
                c.sendall(step.replace(b"connection: close\r\n", f"keep-alive: timeout={self.keep}\r\n".encode()))

    def close(self) -> None:
        self.sock.close()


CREATED = _http(201, b'{"id":"sb_1","state":"running"}')


class KeptConnections(unittest.TestCase):
    """A kept connection the server closes under a call: a call that may run twice is sent again, one that may not is not."""

    def test_sync(self) -> None:
        s = _KeptServer([CREATED, None, CREATED, OK_LIST, None, OK_LIST])
        w = Warren(s.url, "k", retry=Retry(attempts=1))
        self.assertEqual(w.sandboxes.create(image="busybox:latest").id, "sb_1")
        with self.assertRaises(TransportError) as broke:
            w.sandboxes.create(image="busybox:latest")
        self.assertIs(broke.exception.details.get("sent"), True)
        self.assertEqual(len(s.requests), 2, "a create the server may have taken is not sent again")
        self.assertEqual(w.sandboxes.create(image="busybox:latest").id, "sb_1")
        self.assertEqual(w.sandboxes.list(), [])
        self.assertEqual(w.sandboxes.list(), [], "a list is sent again on a new connection")
        self.assertEqual((len(s.requests), s.connections), (6, 3))
        w.close()
        s.close()

    def test_async(self) -> None:
        s = _KeptServer([CREATED, None, CREATED, OK_LIST, None, OK_LIST])

        async def main() -> None:
            async with AsyncWarren(s.url, "k", retry=Retry(attempts=1), max_connections=1) as w:
                self.assertEqual((await w.sandboxes.create(image="busybox:latest")).id, "sb_1")
                with self.assertRaises(TransportError) as broke:
                    await w.sandboxes.create(image="busybox:latest")
                self.assertIs(broke.exception.details.get("sent"), True)
                self.assertEqual(len(s.requests), 2, "a create the server may have taken is not sent again")
                self.assertEqual((await w.sandboxes.create(image="busybox:latest")).id, "sb_1")
                self.assertEqual(await w.sandboxes.list(), [])
                self.assertEqual(await w.sandboxes.list(), [], "a list is sent again on a new connection")

        asyncio.run(asyncio.wait_for(main(), 10))
        self.assertEqual((len(s.requests), s.connections), (6, 3))
        s.close()

    def test_not_used_past_the_servers_keep_alive_timeout(self) -> None:
        # timeout=1: kept for 1 s less the margin, i.e. not at all: every call on a new connection.
        s = _KeptServer([OK_LIST, OK_LIST, OK_LIST], keep=1)
        w = Warren(s.url, "k")
        for _ in range(3):
            self.assertEqual(w.sandboxes.list(), [])
        self.assertEqual(s.connections, 3)
        w.close()
        s.close()
        a = _KeptServer([OK_LIST, OK_LIST], keep=1)

        async def main() -> None:
            async with AsyncWarren(a.url, "k") as aw:
                for _ in range(2):
                    self.assertEqual(await aw.sandboxes.list(), [])

        asyncio.run(asyncio.wait_for(main(), 10))
        self.assertEqual(a.connections, 2)
        a.close()

    def test_keep_seconds(self) -> None:
        from warren._keepalive import keep_seconds

        self.assertEqual(
            [keep_seconds(h) for h in ("timeout=65", "timeout=5, max=100", None, "max=3", "timeout=x", "timeout=0", "timeout=inf", "timeout=-1", "timeout=1e9")],
            [64.0, 4.0, 4.0, 4.0, 4.0, 0.0, 4.0, 4.0, 4.0],
        )

    def test_an_idle_connection_is_dropped_only_when_the_server_ended_it_at_any_descriptor(self) -> None:
        from warren._sync_http import _dropped

        # Past descriptor 1023, where select() cannot look: a live idle socket is kept, an ended one is not.
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 1200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2048), hard))
        a, b = socket.socketpair()
        high = [os.dup2(a.fileno(), 1100), os.dup2(b.fileno(), 1101)]
        a.close()
        b.close()
        x, y = socket.socket(fileno=high[0]), socket.socket(fileno=high[1])
        try:
            self.assertFalse(_dropped(x))
            y.close()
            self.assertTrue(_dropped(x))
        finally:
            x.close()


class AsyncClientMadeOutsideALoop(unittest.TestCase):
    def test_made_before_asyncio_run_and_calls_wait_for_a_free_connection(self) -> None:
        # A client made at module level, used in asyncio.run's new loop, with more calls at once
        # than connections: the waiting calls must not belong to another loop (Python 3.9).
        s = _Server([OK_LIST, OK_LIST, OK_LIST])
        w = AsyncWarren(s.url, "k", max_connections=1)

        async def main() -> List[list]:
            try:
                return list(await asyncio.gather(*(w.sandboxes.list() for _ in range(3))))
            finally:
                await w.close()

        self.assertEqual(asyncio.run(asyncio.wait_for(main(), 10)), [[], [], []])
        s.close()


class BrokenStreams(unittest.TestCase):
    """A server that dies mid-stream: a clear error at once, never a hang."""

    LINE = b'{"type":"start","commandId":"c"}\n'
    HALF = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n"
        + f"{len(LINE):x}\r\n".encode()
        + LINE
        + b"\r\n"
    )

    def test_sync(self) -> None:
        s = _Server([self.HALF])
        w = Warren(s.url, "k")
        from warren.client import Sandbox

        handle = Sandbox(w._t, SandboxInfo(id="sb_x"))
        seen = []
        with self.assertRaises(TransportError):
            for ev in handle.exec_stream("sleep 100"):
                seen.append(ev.type)
        self.assertEqual(seen, ["start"])
        s.close()

    def test_async(self) -> None:
        s = _Server([self.HALF])

        async def main() -> List[str]:
            from warren.aio import AsyncSandbox

            async with AsyncWarren(s.url, "k") as w:
                handle = AsyncSandbox(w._t, SandboxInfo(id="sb_x"))
                seen = []
                with self.assertRaises(TransportError):
                    async for ev in handle.exec_stream("sleep 100"):
                        seen.append(ev.type)
                return seen

        self.assertEqual(asyncio.run(asyncio.wait_for(main(), 10)), ["start"])
        s.close()

    def test_nothing_listens(self) -> None:
        async def main() -> None:
            async with AsyncWarren("http://127.0.0.1:9", "k", retry=Retry(attempts=1)) as w:
                with self.assertRaises(TransportError):
                    await w.info()

        asyncio.run(main())
        with self.assertRaises(TransportError):
            Warren("http://127.0.0.1:9", "k", retry=Retry(attempts=1)).info()


if __name__ == "__main__":
    unittest.main()
