"""The blocking client against a real Warren: every call, streaming, reattach, errors."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import threading
import unittest

from tests.live import KEY, URL, label, needs_server

from warren import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    Retry,
    TransportError,
    UnauthenticatedError,
    Warren,
    WarrenError,
)


@needs_server
class SandboxCalls(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.w = Warren(URL, KEY)
        cls.job = label()
        cls.sb = cls.w.sandboxes.create(
            image="debian-python:latest",
            resources={"cpu": 1, "memoryMiB": 512},
            network={"egress": "deny", "allow": ["pypi.example"]},
            labels={"job": cls.job},
            files={"/workspace/TASK.md": "fix the bug", "/workspace/bin.dat": b"\x00\xff"},
            request_id=f"{cls.job}-ep-7",
            env={"FROM_CREATE": "yes"},
            ttl_seconds=600,
        )

    @classmethod
    def tearDownClass(cls) -> None:
        cls.w.batch.delete({"job": cls.job})
        cls.w.close()

    def test_create_info_and_request_id(self) -> None:
        info = self.sb.info
        self.assertEqual(info.state, "running")
        self.assertEqual(info.labels, {"job": self.job})
        self.assertEqual(info.resources.memory_mib, 512)
        self.assertEqual(info.network["allow"], ["pypi.example"])
        self.assertIsNotNone(info.expires_at)
        # The same request id makes no second sandbox.
        again = self.w.sandboxes.create(image="debian-python:latest", labels={"job": self.job}, request_id=f"{self.job}-ep-7")
        self.assertEqual(again.id, self.sb.id)
        self.assertEqual(self.sb.files.read("/workspace/TASK.md"), b"fix the bug")
        self.assertEqual(self.sb.files.read("/workspace/bin.dat"), b"\x00\xff")

    def test_exec(self) -> None:
        r = self.sb.exec("python3 -c 'print(6*7)'", timeout_ms=60_000)
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.timed_out, r.truncated), ("42\n", "", 0, False, False))
        self.assertTrue(r.command_id)
        r = self.sb.exec(["sh", "-c", "echo $FROM_CREATE $X; echo err >&2; exit 3"], env={"X": "x"})
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("yes x\n", "err\n", 3))
        self.assertIsNone(r.killed_by)
        r = self.sb.exec("sleep 5", timeout_ms=300)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.killed_by, "timeout")
        r = self.sb.exec("head -c 100000 /dev/zero | tr '\\0' a", max_output_bytes=1000)
        self.assertTrue(r.truncated)
        self.assertLessEqual(len(r.stdout), 1000)
        self.assertEqual(self.sb.exec("cat", stdin="in put").stdout, "in put")

    def test_exec_stream(self) -> None:
        evs = list(self.sb.exec_stream(["sh", "-c", "echo a; echo b >&2; exit 4"]))
        self.assertEqual(evs[0].type, "start")
        self.assertTrue(evs[0].command_id)
        self.assertEqual("".join(e.data or "" for e in evs if e.type == "stdout"), "a\n")
        self.assertEqual("".join(e.data or "" for e in evs if e.type == "stderr"), "b\n")
        self.assertEqual((evs[-1].type, evs[-1].exit_code), ("exit", 4))

    def test_shell(self) -> None:
        with self.sb.shell(cwd="/workspace") as sh:
            sh.exec("export A=1 && cd /tmp")
            self.assertEqual(sh.exec("pwd; echo $A").stdout, "/tmp\n1\n")
            evs = list(sh.exec_stream("echo $A"))
            self.assertEqual(evs[-1].exit_code, 0)
            # Threads on one shell: each command runs in its turn, in the order they were called
            # (each thread starts once the one before has its place: its ticket taken).
            results: list = [None] * 6
            taken = threading.Semaphore(0)
            take = sh._turns.take

            def take_and_tell() -> int:
                t = take()
                taken.release()
                return t

            sh._turns.take = take_and_tell  # type: ignore[method-assign]

            def run(i: int) -> None:
                results[i] = sh.exec("sleep 0.2; B=0" if i == 0 else f"B=${{B}}{i}; echo $B").stdout

            threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
            for th in threads:
                th.start()
                taken.acquire()
            for th in threads:
                th.join()
            self.assertEqual(results[1:], ["01\n", "012\n", "0123\n", "01234\n", "012345\n"])
        with self.assertRaises(NotFoundError):
            self.sb.exec("true", session=sh.id)

    def test_files(self) -> None:
        f = self.sb.files
        f.write("/workspace/a.py", "print(1)\n")
        self.assertEqual(f.read("/workspace/a.py"), b"print(1)\n")
        self.assertEqual(f.read_text("/workspace/a.py"), "print(1)\n")
        f.write("/workspace/run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
        self.assertEqual(self.sb.exec("/workspace/run.sh").stdout, "ran\n")
        st = f.stat("/workspace/run.sh")
        self.assertEqual((st.type, st.mode & 0o777, st.size), ("file", 0o755, 19))
        names = {e.name for e in f.list("/workspace")}
        self.assertTrue({"a.py", "run.sh", "TASK.md"} <= names, names)
        f.mkdir("/workspace/d/e")
        self.assertEqual(f.stat("/workspace/d/e").type, "dir")
        f.move("/workspace/a.py", "/workspace/d/b.py")
        self.assertFalse(f.exists("/workspace/a.py"))
        self.assertTrue(f.exists("/workspace/d/b.py"))
        f.remove("/workspace/d", recursive=True)
        self.assertFalse(f.exists("/workspace/d"))
        with self.assertRaises(NotFoundError):
            f.read("/workspace/nope")
        with self.assertRaises(InvalidArgumentError) as cm:
            f.read("relative/path")
        self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_argument", 400))
        self.assertTrue(cm.exception.message)

    def test_upload_and_download_dir(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "repo", "pkg"))
            with open(os.path.join(d, "repo", "pkg", "m.py"), "w") as fh:
                fh.write("X = 1\n")
            os.symlink("pkg/m.py", os.path.join(d, "repo", "link.py"))
            self.sb.files.upload_dir(os.path.join(d, "repo"), "/workspace/repo")
            self.assertEqual(self.sb.exec("cat /workspace/repo/pkg/m.py; readlink /workspace/repo/link.py").stdout, "X = 1\npkg/m.py\n")
            self.sb.exec("mkdir -p /workspace/out && echo result > /workspace/out/r.txt && ln -s r.txt /workspace/out/l")
            n = self.sb.files.download_dir("/workspace/out", os.path.join(d, "out"))
            self.assertEqual(n, 7)
            with open(os.path.join(d, "out", "r.txt")) as fh:
                self.assertEqual(fh.read(), "result\n")
            self.assertEqual(os.readlink(os.path.join(d, "out", "l")), "r.txt")

    def test_download_refuses_a_hostile_archive(self) -> None:
        # The sandbox plants a link out of the destination: nothing is written through it.
        self.sb.exec("mkdir -p /workspace/evil && ln -sfn /etc /workspace/evil/escape")
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(WarrenError):
                self.sb.files.download_dir("/workspace/evil", os.path.join(d, "out"))
            self.assertFalse(os.path.lexists(os.path.join(d, "out", "escape")))

    def test_get_list_and_batch(self) -> None:
        got = self.w.sandboxes.get(self.sb.id)
        self.assertEqual(got.id, self.sb.id)
        mine = self.w.sandboxes.list(labels={"job": self.job}, state="running")
        self.assertIn(self.sb.id, [s.id for s in mine])
        with self.assertRaises(NotFoundError) as cm:
            self.w.sandboxes.get("sb_nope")
        self.assertEqual(cm.exception.status, 404)

    def test_list_pages_through(self) -> None:
        job = label()
        made = self.w.sandboxes.batch_create(count=5, template={"image": "busybox:latest", "labels": {"job": job}})
        try:
            self.assertEqual((len(made.sandboxes), made.errors), (5, []))
            ids = [s.id for s in self.w.sandboxes.list(labels={"job": job}, page_size=2)]
            self.assertEqual(sorted(ids), sorted(s.id for s in made.sandboxes))
            self.assertEqual(self.w.batch.pause({"job": job}), 5)
            self.assertEqual({s.info.state for s in self.w.sandboxes.list(labels={"job": job})}, {"paused"})
            self.assertEqual(self.w.batch.resume({"job": job}), 5)
        finally:
            self.assertEqual(self.w.batch.delete({"job": job}), 5)
        # Deleted sandboxes stay listed, stopped, for a while (their ids stay known).
        self.assertEqual({s.info.state for s in self.w.sandboxes.list(labels={"job": job})}, {"stopped"})
        self.assertEqual(self.w.sandboxes.list(labels={"job": job}, state="running"), [])

    def test_lease(self) -> None:
        with self.w.lease(ttl=30, labels={"job": self.job}) as lease:
            sb = self.w.sandboxes.create(image="busybox:latest", lease=lease, labels={"job": self.job})
            self.assertEqual(sb.info.raw["lease"], lease.id)
            self.assertEqual(lease.renew()["renewals"], 1)
            self.assertIn(lease.id, [x["id"] for x in self.w.leases.list("active")])
        # Leaving the block deletes the lease, and the sandboxes made with it.
        self.assertEqual(self.w.sandboxes.get(sb.id).info.state, "stopped")
        self.assertEqual((self.w.sandboxes.get(sb.id).info.end or {}).get("reason"), "lease")
        self.assertEqual(self.w.leases.get(lease.id).info["state"], "deleted")
        with self.assertRaises(ConflictError):
            lease.renew()

    def test_events(self) -> None:
        job = label()
        sb = self.w.sandboxes.create(image="busybox:latest", labels={"job": job})
        sb.delete()
        seen = []
        for ev in self.w.events(since=0, labels={"job": job}):
            seen.append(ev["type"])
            if ev["type"] == "ended":
                self.assertEqual(ev["end"]["reason"], "deleted")
                break
        self.assertEqual(seen, ["created", "started", "ended"])

    def test_pause_resume_timeout_network(self) -> None:
        with self.w.sandboxes.create(image="busybox:latest", labels={"job": self.job}) as sb:
            sb.exec("echo kept > /tmp/k")
            sb.pause()
            self.assertEqual(sb.refresh().state, "paused")
            sb.resume()
            self.assertEqual(sb.exec("cat /tmp/k").stdout, "kept\n")
            info = sb.set_timeout(600)
            self.assertIsNotNone(info.expires_at)
            info = sb.set_network({"egress": "deny", "allow": ["npm.example"]})
            self.assertEqual(info.network["allow"], ["npm.example"])
        # Deleted on exit of the with block, and it says so.
        self.assertEqual(self.w.sandboxes.get(sb.id).info.state, "stopped")
        self.assertEqual((self.w.sandboxes.get(sb.id).info.end or {}).get("reason"), "deleted")
        sb.delete()  # idempotent

    def test_commit(self) -> None:
        name = f"{self.job}-env:v1"
        with self.w.sandboxes.create(image="busybox:latest", labels={"job": self.job}) as sb:
            sb.exec("echo built > /opt-made")
            img = sb.commit(name)
        self.assertEqual(img.name, name)
        try:
            self.assertIn(name, [i.name for i in self.w.images.list()])
            with self.w.sandboxes.create(image=name, labels={"job": self.job}) as sb2:
                self.assertEqual(sb2.exec("cat /opt-made").stdout, "built\n")
                # Who uses it is listed, and its delete refused while they live.
                self.assertEqual([i.used_by for i in self.w.images.list() if i.name == name], [1])
                with self.assertRaises(ConflictError):
                    self.w.images.delete(name)
        finally:
            self.w.images.delete(name)

    def test_fork_and_snapshot(self) -> None:
        with self.w.sandboxes.create(image="busybox:latest", labels={"job": self.job}, workdir="/w") as src:
            src.exec("echo forked > /w/f")
            r = src.fork(2, labels={"job": self.job, "gen": "1"})
            self.assertEqual(r.errors, [])
            try:
                self.assertEqual([c.exec("cat f").stdout for c in r.sandboxes], ["forked\n", "forked\n"])
                self.assertEqual(r.sandboxes[0].info.labels, {"job": self.job, "gen": "1"})
            finally:
                for c in r.sandboxes:
                    c.delete()
            snap = src.snapshot(f"{self.job}-snap:v1")
        try:
            self.assertEqual((snap.snapshot or {}).get("workdir"), "/w")
            self.assertEqual([s.name for s in self.w.snapshots.list(sandbox=src.id)], [snap.name])
            with self.w.sandboxes.create(snapshot=snap.name, labels={"job": self.job}) as sb2:
                self.assertEqual(sb2.exec("cat f").stdout, "forked\n")
        finally:
            self.w.snapshots.delete(snap.name)
        self.assertEqual(self.w.snapshots.list(sandbox=src.id), [])

    def test_background_command_reattach_wait_kill(self) -> None:
        cmd = self.sb.exec_background("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo done")
        self.assertTrue(cmd.command_id)
        r = cmd.wait()
        self.assertEqual((r.stdout, r.exit_code, r.command_id), ("line1\nline2\nline3\ndone\n", 0, cmd.id))
        # From an offset: the output after its first 6 bytes.
        tail = "".join(e.data or "" for e in cmd.reattach(offset=6) if e.type == "stdout")
        self.assertEqual(tail, "line2\nline3\ndone\n")
        # From another handle, another client, as another process would.
        other = Warren(URL, KEY).sandboxes.get(self.sb.id).command(cmd.id)
        self.assertEqual(other.wait().stdout, r.stdout)
        long = self.sb.exec_background("sleep 30")
        long.kill("SIGKILL")
        killed = long.wait()
        self.assertEqual((killed.signal, killed.killed_by), ("SIGKILL", "request"))
        self.assertIsNone(r.killed_by)
        cat = self.sb.exec_background("cat", keep_stdin_open=True)
        cat.write_stdin("to cat", eof=True)
        self.assertEqual(cat.wait().stdout, "to cat")

    def test_reattach_after_a_dropped_connection(self) -> None:
        seen = []
        cmd_id = None
        events = self.sb.exec_stream("echo first; sleep 1; echo second")
        for ev in events:
            if ev.type == "start":
                cmd_id = ev.command_id
            if ev.type == "stdout":
                seen.append(ev.data)
                break
        events.close()  # the connection is dropped mid-command
        assert cmd_id is not None
        offset = sum(len((d or "").encode()) for d in seen)
        rest = list(self.sb.command(cmd_id).reattach(offset))
        self.assertEqual("".join(e.data or "" for e in rest if e.type == "stdout"), "second\n")
        self.assertEqual(rest[-1].exit_code, 0)


def _docker_save(layer: bytes, env: list) -> bytes:
    """A `docker save` tarball of one layer over busybox's."""
    import hashlib
    import json

    busybox = os.environ.get("WARREN_TEST_BUSYBOX", "/bin/busybox")
    lt = io.BytesIO()
    with tarfile.open(fileobj=lt, mode="w") as tf:
        tf.add(busybox, arcname="bin/busybox")
        with tarfile.open(fileobj=io.BytesIO(layer)) as extra:
            for m in extra.getmembers():
                tf.addfile(m, extra.extractfile(m))
    data = lt.getvalue()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": env}, "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(data).hexdigest()]}}).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tf:
        for name, content in (("config.json", config), ("l0/layer.tar", data), ("manifest.json", json.dumps([{"Config": "config.json", "RepoTags": ["app:1"], "Layers": ["l0/layer.tar"]}]).encode())):
            ti = tarfile.TarInfo(name)
            ti.size = len(content)
            tf.addfile(ti, io.BytesIO(content))
    return out.getvalue()


@needs_server
class OtherCalls(unittest.TestCase):
    def setUp(self) -> None:
        self.w = Warren(URL, KEY)

    def tearDown(self) -> None:
        self.w.close()

    def test_fn(self) -> None:
        r = self.w.fn.run(language="python", code="print(1+1)")
        self.assertEqual((r.stdout, r.exit_code), ("2\n", 0))
        self.assertGreaterEqual(r.queued_ms, 0)
        out = self.w.fn.batch([{"language": "bash", "code": "echo $((2*3))"}, {"language": "python", "code": "import sys; sys.exit(5)"}])
        self.assertEqual([getattr(x, "exit_code", None) for x in out], [0, 5])
        self.assertEqual(out[0].stdout, "6\n")  # type: ignore[union-attr]

    def test_images_layers_and_import(self) -> None:
        names = [i.name for i in self.w.images.list()]
        self.assertIn("busybox:latest", names)
        layer_tar = io.BytesIO()
        with tarfile.open(fileobj=layer_tar, mode="w") as tf:
            data = b"from a layer\n"
            ti = tarfile.TarInfo("etc/py-layer")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        name = f"{label()}-layer"
        layer = self.w.layers.upload(name, layer_tar.getvalue())
        self.assertTrue(layer.digest.startswith("sha256:"))
        try:
            self.assertIn(name, [x.name for x in self.w.layers.list()])
            with self.w.sandboxes.create(image="busybox:latest", layers=[name]) as sb:
                self.assertEqual(sb.exec("cat /etc/py-layer").stdout, "from a layer\n")
        finally:
            self.w.layers.delete(name)
        # A `docker save` tarball, imported with its progress reported.
        with tempfile.NamedTemporaryFile(suffix=".tar") as saved:
            saved.write(_docker_save(layer_tar.getvalue(), ["PATH=/bin", "FROM_IMAGE=1"]))
            saved.flush()
            img_name = f"{label()}:1"
            seen: list = []
            img = self.w.images.import_tar(saved.name, name=img_name, on_progress=seen.append)
            try:
                self.assertEqual((img.name, img.env["FROM_IMAGE"], len(img.layers)), (img_name, "1", 1))
                self.assertTrue(seen and all(p.phase in ("receive", "layer") for p in seen), seen)
                with self.w.sandboxes.create(image=img_name) as sb:
                    self.assertEqual(sb.exec(["/bin/busybox", "cat", "/etc/py-layer"]).stdout, "from a layer\n")
            finally:
                self.w.images.delete(img_name)
        # An import of something that is no image: the stream's error is raised.
        with tempfile.NamedTemporaryFile(suffix=".tar") as bad:
            bad.write(layer_tar.getvalue())
            bad.flush()
            with self.assertRaises(WarrenError) as cm:
                self.w.images.import_tar(bad.name, name=f"{label()}:bad")
            self.assertEqual(cm.exception.code, "invalid_argument")

    def test_pools(self) -> None:
        p = self.w.pools.create(image="busybox:latest", size=1, resources={"cpu": 0.5, "memory_mib": 128})
        try:
            self.assertEqual(p.size, 1)
            self.assertEqual(p.resources["memoryMiB"], 128)
            self.assertIn(p.id, [x.id for x in self.w.pools.list()])
        finally:
            self.w.pools.delete(p.id)

    def test_keys_and_auth_errors(self) -> None:
        k = self.w.keys.create("py-tenant", quota={"sandboxes": 1})
        try:
            user = Warren(URL, k["key"])
            self.assertEqual(user.sandboxes.list(), [])
            with self.assertRaises(WarrenError) as cm:
                user.keys.create("other")
            self.assertEqual(cm.exception.code, "permission_denied")
        finally:
            self.w.keys.revoke(k["keyId"])
        with self.assertRaises(UnauthenticatedError):
            Warren(URL, k["key"]).sandboxes.list()
        self.assertGreaterEqual(len(self.w.nodes()), 1)
        self.assertTrue(self.w.info())

    def test_threads_share_one_client(self) -> None:
        with self.w.sandboxes.create(image="busybox:latest") as sb:
            outs: list = []

            def run(i: int) -> None:
                outs.append(sb.exec(f"echo {i}").stdout)

            ts = [threading.Thread(target=run, args=(i,)) for i in range(16)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            self.assertEqual(sorted(outs), sorted(f"{i}\n" for i in range(16)))

    def test_a_server_that_is_not_there(self) -> None:
        # A port nothing listens on: a clear transport error, no hang, retries bounded.
        slept: list = []
        w = Warren("http://127.0.0.1:9", "k", retry=Retry(attempts=3, sleep=slept.append))
        with self.assertRaises(TransportError) as cm:
            w.sandboxes.list()
        self.assertEqual((cm.exception.code, cm.exception.status), ("unavailable", None))
        self.assertEqual(len(slept), 2)


if __name__ == "__main__":
    unittest.main()
