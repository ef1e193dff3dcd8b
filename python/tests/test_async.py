"""The asyncio client against a real Warren: the same surface, and hundreds of sandboxes at once."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import unittest
from typing import AsyncIterator, List

from tests.live import KEY, URL, label, needs_server

from warren import AsyncWarren, ExecEvent, NotFoundError, WarrenError

SMALL = {"cpu": 0.1, "memoryMiB": 64}


async def _events(it: AsyncIterator[ExecEvent]) -> List[ExecEvent]:
    return [ev async for ev in it]


@needs_server
class AsyncCalls(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.w = AsyncWarren(URL, KEY)
        self.job = label()

    async def asyncTearDown(self) -> None:
        await self.w.batch.delete({"job": self.job})
        await self.w.close()

    async def test_the_surface(self) -> None:
        async with await self.w.sandboxes.create(
            image="debian-python:latest", labels={"job": self.job}, files={"/workspace/TASK.md": "task"}, request_id=f"{self.job}-1"
        ) as sb:
            r = await sb.exec("python3 -c 'print(6*7)'", timeout_ms=60_000)
            self.assertEqual((r.stdout, r.exit_code, r.timed_out), ("42\n", 0, False))
            evs = [ev async for ev in sb.exec_stream(["sh", "-c", "echo a; exit 2"])]
            self.assertEqual([e.type for e in evs], ["start", "stdout", "exit"])
            self.assertEqual(evs[-1].exit_code, 2)
            async with await sb.shell(cwd="/workspace") as sh:
                await sh.exec("export A=1 && cd /tmp")
                self.assertEqual((await sh.exec("pwd; echo $A")).stdout, "/tmp\n1\n")
                # gather on one shell: every command runs, in its turn, in the order given.
                cmds = ["sleep 0.2; A=1"] + [f"A=${{A}}{i}; echo $A" for i in range(2, 8)]
                rs = await asyncio.gather(*(sh.exec(c) for c in cmds))
                self.assertEqual([r.stdout for r in rs[1:]], [f"1{''.join(str(n) for n in range(2, i + 1))}\n" for i in range(2, 8)])
                evs = await asyncio.gather(*(_events(sh.exec_stream(c)) for c in ["sleep 0.1; A=x", "echo $A"]))
                self.assertEqual("".join(e.data or "" for e in evs[1] if e.type == "stdout"), "x\n")
            f = sb.files
            await f.write("/workspace/a.py", "print(1)\n")
            self.assertEqual(await f.read("/workspace/a.py"), b"print(1)\n")
            self.assertIn("a.py", [e.name for e in await f.list("/workspace")])
            self.assertEqual((await f.stat("/workspace/TASK.md")).size, 4)
            await f.mkdir("/workspace/d")
            await f.move("/workspace/a.py", "/workspace/d/a.py")
            self.assertTrue(await f.exists("/workspace/d/a.py"))
            await f.remove("/workspace/d", recursive=True)
            self.assertFalse(await f.exists("/workspace/d"))
            with tempfile.TemporaryDirectory() as d:
                os.makedirs(os.path.join(d, "src"))
                with open(os.path.join(d, "src", "x"), "w") as fh:
                    fh.write("x\n")
                await f.upload_dir(os.path.join(d, "src"), "/workspace/src")
                self.assertEqual(await f.download_dir("/workspace/src", os.path.join(d, "back")), 2)
                with open(os.path.join(d, "back", "x")) as fh:
                    self.assertEqual(fh.read(), "x\n")
            cmd = await sb.exec_background("echo one; sleep 0.3; echo two")
            self.assertEqual((await cmd.wait()).stdout, "one\ntwo\n")
            tail = [e.data async for e in cmd.reattach(offset=4) if e.type == "stdout"]
            self.assertEqual("".join(x or "" for x in tail), "two\n")
            k = await sb.exec_background("sleep 30")
            await k.kill("SIGKILL")
            self.assertEqual((await k.wait()).signal, "SIGKILL")
            await sb.pause()
            self.assertEqual((await sb.refresh()).state, "paused")
            await sb.resume()
            self.assertIsNotNone((await sb.set_timeout(300)).expires_at)
            self.assertEqual((await self.w.sandboxes.get(sb.id)).id, sb.id)
            self.assertIn(sb.id, [s.id for s in await self.w.sandboxes.list(labels={"job": self.job})])
        self.assertEqual((await self.w.sandboxes.get(sb.id)).info.state, "stopped")
        # Its life as lifecycle events, ended last.
        seen = []
        async for ev in self.w.events(since=0, labels={"job": self.job}):
            seen.append(ev["type"])
            if ev["type"] == "ended":
                break
        self.assertEqual(seen, ["created", "started", "paused", "resumed", "ended"])
        with self.assertRaises(NotFoundError):
            await self.w.sandboxes.get("sb_nope")
        self.assertEqual((await self.w.fn.run(language="python", code="print(1+1)")).stdout, "2\n")
        out = await self.w.fn.batch([{"language": "bash", "code": "echo 1"}, {"language": "bash", "code": "exit 3"}])
        self.assertEqual([getattr(x, "exit_code", None) for x in out], [0, 3])
        self.assertIn("busybox:latest", [i.name for i in await self.w.images.list()])
        self.assertTrue(await self.w.info())

    async def test_errors_carry_the_api_code(self) -> None:
        with self.assertRaises(WarrenError) as cm:
            await self.w.sandboxes.create(image="no-such-image:1", labels={"job": self.job})
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))

    async def test_200_sandboxes_at_once(self) -> None:
        n = 200
        t0 = time.monotonic()
        sbs = await asyncio.gather(*(self.w.sandboxes.create(image="busybox:latest", resources=SMALL, labels={"job": self.job}) for _ in range(n)))
        created = time.monotonic() - t0
        self.assertEqual(len({s.id for s in sbs}), n)
        t0 = time.monotonic()
        rs = await asyncio.gather(*(s.exec(f"echo {i}") for i, s in enumerate(sbs)))
        ran = time.monotonic() - t0
        self.assertEqual([r.stdout for r in rs], [f"{i}\n" for i in range(n)])
        self.assertEqual(len(await self.w.sandboxes.list(labels={"job": self.job}, state="running", page_size=50)), n)
        await asyncio.gather(*(s.delete() for s in sbs))
        print(f"\n  {n} sandboxes: created in {created:.1f} s, one command each in {ran:.1f} s", flush=True)


if __name__ == "__main__":
    unittest.main()
