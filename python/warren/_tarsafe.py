"""Directory trees to and from tar, for upload_dir and download_dir.

What comes out of a sandbox is hostile: an archive it made may name ``../`` paths, absolute
paths, links out of the destination, device nodes, or more bytes than any disk has. Extraction
here writes only regular files, directories and links that stay inside the destination, never
through a link, without set-id bits, and at most ``max_bytes`` in all.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from typing import IO

from .errors import WarrenError

DEFAULT_MAX_BYTES = 4 * 1024**3


def pack_dir(local: str, out: IO[bytes]) -> None:
    """A tar of the directory ``local`` (its contents, not the directory itself) into ``out``."""
    if not os.path.isdir(local):
        raise WarrenError(f"{local} is not a directory", code="invalid_argument")
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name in sorted(os.listdir(local)):
            tf.add(os.path.join(local, name), arcname=name, recursive=True)
    out.seek(0)


def _bad(msg: str) -> WarrenError:
    return WarrenError(f"the archive from the sandbox was refused: {msg}", code="invalid_argument")


def _inside(root: str, rel: str) -> str:
    """``root/rel`` for a tar name that stays under root; refuses any other."""
    name = rel.replace("\\", "/")
    if name.startswith("/") or "\0" in name:
        raise _bad(f"absolute or NUL name {rel!r}")
    norm = posixpath.normpath(name)
    if norm == ".":
        return root
    if norm.startswith("../") or norm == ".." or "/../" in f"/{norm}/":
        raise _bad(f"name {rel!r} leaves the destination")
    return os.path.join(root, *norm.split("/"))


def _no_links_above(root: str, path: str) -> None:
    """No component between root and path is a symlink (nothing is written through a link)."""
    rel = os.path.relpath(os.path.dirname(path), root)
    cur = root
    if rel == ".":
        return
    for part in rel.split(os.sep):
        cur = os.path.join(cur, part)
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise _bad(f"{os.path.relpath(path, root)!r} would be written through a link or a file")


def _clear(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        return
    os.unlink(path)


def extract_safely(src: IO[bytes], dest: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Extracts the tar ``src`` into ``dest`` (made if missing); returns the bytes written."""
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    written = 0
    with tarfile.open(fileobj=src, mode="r|*") as tf:
        for m in tf:
            path = _inside(root, m.name)
            if path == root:
                continue
            _no_links_above(root, path)
            mode = m.mode & 0o777
            if m.isdir():
                if os.path.lexists(path) and not os.path.isdir(path):
                    os.unlink(path)
                os.makedirs(path, exist_ok=True)
                os.chmod(path, mode | 0o700)
            elif m.isfile():
                written += m.size
                if written > max_bytes:
                    raise WarrenError(f"the archive passed {max_bytes} bytes", code="payload_too_large")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                _clear(path)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
                with os.fdopen(fd, "wb") as out:
                    f = tf.extractfile(m)
                    assert f is not None
                    while True:
                        b = f.read(1 << 20)
                        if not b:
                            break
                        out.write(b)
            elif m.issym() or m.islnk():
                target = m.linkname
                # A symlink resolves from its own directory, a hard link from the archive's root.
                base = os.path.dirname(path) if m.issym() else root
                if target.startswith("/") or not _within(root, os.path.normpath(os.path.join(base, target))):
                    raise _bad(f"link {m.name!r} → {target!r} leaves the destination")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                _clear(path)
                if m.issym():
                    os.symlink(target, path)
                else:
                    src_path = _inside(root, target)
                    _no_links_above(root, src_path)
                    if not os.path.isfile(src_path) or os.path.islink(src_path):
                        raise _bad(f"hard link {m.name!r} to {target!r}, which is no file it extracted")
                    os.link(src_path, path)
            # Devices, FIFOs and the like are left out.
    return written


def _within(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
