# The Python zygote of a Warren FnCall worker, started by warren-init (native/init/fncall.c, op F)
# as `python3 /.warren/fn-zygote.py TMPFS_KIB FILTERED` with fd 3 a socket to the init. It pays for the
# interpreter's start once; each call is one fork of it, PID 1 of a new pid namespace, that takes
# namespaces and a root of its own (native/fn.c through ctypes) and runs the code as `python3 -c`.
#
# Per call the init sends one byte with six descriptors: the request (the F frame's fields, in a
# memfd), stdin (a memfd), stdout, stderr, the error pipe and the status pipe; the loop that takes
# them and forks is native/fn-serve.c. Errors before the code runs go to the error pipe as
# warren-init's child errors do (int errno + message).
import ctypes
import os
import signal
import struct
import sys

# What calls commonly import, imported once here instead of in every call.
import collections  # noqa: F401
import gc
import functools  # noqa: F401
import itertools  # noqa: F401
import json  # noqa: F401
import math  # noqa: F401
import re  # noqa: F401
import select  # noqa: F401
import socket  # noqa: F401
import traceback
import types

NFD = 6
TMPFS_KIB = int(sys.argv[1]) if len(sys.argv) > 1 else 0
# Whether warren-init installed the worker's seccomp filter (the calls' own then stacks on it).
WORKER_FILTERED = len(sys.argv) > 2 and sys.argv[2] == "1"
# PyDLL: the GIL stays held in its calls, as os.fork() holds it around a fork (warren_fn_serve).
lib = ctypes.PyDLL("/.warren/libwarren-fn.so", use_errno=True)
lib.warren_fn_isolate.argtypes = [ctypes.c_ulong, ctypes.c_int]
lib.warren_fn_error.restype = ctypes.c_char_p
lib.warren_fn_set_worker_filtered(1 if WORKER_FILTERED else 0)
lib.warren_fn_serve.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)]


def fields(data):
    out, i = [], 0
    while i + 5 <= len(data):
        k = chr(data[i])
        (n,) = struct.unpack_from("<I", data, i + 1)
        out.append((k, data[i + 5 : i + 5 + n]))
        i += 5 + n
    return out


def report(ep, err, msg):
    try:
        os.write(ep, struct.pack("i", err) + msg.encode("utf-8", "replace")[:470] + b"\0")
    finally:
        os._exit(127)


def lib_error():
    return (lib.warren_fn_error() or b"").decode("utf-8", "replace")


def write_files(req, ep):
    path = None
    for k, v in req:
        if k == "P":
            path = v.decode("utf-8", "surrogateescape")
        elif k == "B" and path is not None:
            try:
                parent = os.path.dirname(path)
                if parent:
                    os.makedirs(parent, 0o755, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(v)
            except OSError as e:
                report(ep, e.errno or 5, "files: %s: %s" % (path, e.strerror))
            path = None


def parts(req):
    """The code, environment and cwd of a request."""
    code = b"".join(v for k, v in req if k == "C")
    env = {}
    cwd = "/tmp"
    for k, v in req:
        if k == "e":
            key, _, val = v.partition(b"=")
            env[key.decode("utf-8", "surrogateescape")] = val.decode("utf-8", "surrogateescape")
        elif k == "c":
            cwd = v.decode("utf-8", "surrogateescape")
    return code, env, cwd


def warm():
    """
    Runs, on made-up input, the Python a call runs before its code, and the compiler: a first run
    sets up state and specialises bytecode, which every call would otherwise write (and so copy)
    for itself: compiling print(1) cost a call 0.8 ms before, 0.07 ms after. Nothing of any call
    is involved.
    """
    req = b"".join(struct.pack("<cI", k, len(v)) + v for k, v in ((b"C", b"pass"), (b"e", b"A=1"), (b"c", b"/")))
    own = dict(os.environ)
    for _ in range(64):
        parts(fields(req))
        lib_error()
        os.makedirs("/", 0o755, exist_ok=True)
        os.environ.clear()
        os.environ.update(own)
        types.ModuleType("__main__")
        exec(compile("import os\nx = str([i for i in range(3)]) + repr({'a': 1}) + f'{os.sep}'\n", "<string>", "exec"), {})


def run(req, fds):
    """The call itself: PID 1 of its own pid namespace, in its own root."""
    _, stdin, stdout, stderr, ep, _ = fds
    if lib.warren_fn_isolate(TMPFS_KIB, 0) < 0:
        report(ep, ctypes.get_errno() or 5, "isolate: " + lib_error())
    write_files(req, ep)
    code, env, cwd = parts(req)
    try:
        os.makedirs(cwd, 0o755, exist_ok=True)
        os.chdir(cwd)
    except OSError as e:
        report(ep, e.errno or 5, "cwd: %s: %s" % (cwd, e.strerror))
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    # Everything else goes: the error pipe (its end tells the init the code runs), the socket,
    # and other calls' status pipes. A sandbox's descriptors stay below 4096.
    os.closerange(3, 4096)
    os.setsid()
    os.umask(0o022)
    os.environ.clear()
    os.environ.update(env)
    for s in (signal.SIGPIPE, signal.SIGCHLD):
        signal.signal(s, signal.SIG_DFL)
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    sys.path[0] = ""
    status = 0
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ else None
        traceback.print_exception(type(e), e, tb)
        status = 1
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = 120 if status == 0 else status
    os._exit(status)


def serve():
    # The loop is C (native/fn-serve.c): once there, the zygote's Python never runs again, so a fork
    # leaves it nothing to copy. It returns in each call's child, with the call's descriptors.
    # What the start left behind is never collected: a call's collections then touch (and copy)
    # none of the zygote's memory.
    warm()
    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    fds = (ctypes.c_int * NFD)()
    fork_steps = (ctypes.c_void_p * 3)(
        *(ctypes.cast(getattr(ctypes.pythonapi, f), ctypes.c_void_p).value for f in ("PyOS_BeforeFork", "PyOS_AfterFork_Parent", "PyOS_AfterFork_Child"))
    )
    os.write(3, b"r")
    if lib.warren_fn_serve(3, fds, fork_steps) != 1:
        os._exit(0)
    fds = list(fds)
    try:
        run(fields(os.pread(fds[0], os.fstat(fds[0]).st_size, 0)), fds)
    finally:
        os._exit(1)


serve()
