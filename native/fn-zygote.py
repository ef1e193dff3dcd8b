# The Python zygote of a Warren FnCall worker, started by warren-init (native/init/fncall.c, op F)
# as `python3 /.warren/fn-zygote.py TMPFS_KIB FILTERED` with fd 3 a socket to the init. It pays for the
# interpreter's start once; each call is one fork of it, PID 1 of a new pid namespace, that takes
# namespaces, a root, its files and descriptors of its own (native/fn-call.c through ctypes) and
# runs the code as `python3 -c`.
#
# Per call the init sends one byte with six descriptors: the request (the F frame's fields, in a
# memfd), stdin (a memfd), stdout, stderr, the error pipe and the status pipe; the loop that takes
# them and forks is native/fn-serve.c. Errors before the code runs go to the error pipe as
# warren-init's child errors do (int errno + message), from native/fn-call.c.
import ctypes
import os
import signal
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
lib.warren_fn_set_worker_filtered(1 if WORKER_FILTERED else 0)
lib.warren_fn_serve.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)]
lib.warren_fn_prepare.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_ulong, ctypes.c_void_p]


class Call(ctypes.Structure):
    """What a call runs (struct warren_fn_call): its code, its environment (NUL between entries)."""

    _fields_ = [("code", ctypes.c_void_p), ("ncode", ctypes.c_size_t), ("env", ctypes.c_void_p), ("nenv", ctypes.c_size_t), ("count", ctypes.c_size_t)]


def environment(blob, count):
    """A call's environment from its "K=V" entries, NUL between two."""
    env = {}
    if count:
        for v in blob.split(b"\0"):
            key, _, val = v.partition(b"=")
            env[key.decode("utf-8", "surrogateescape")] = val.decode("utf-8", "surrogateescape")
    return env


def warm():
    """
    Runs, on made-up input, the Python a call runs before its code, and the compiler: a first run
    sets up state and specialises bytecode, which every call would otherwise write (and so copy)
    for itself: compiling print(1) cost a call 0.8 ms before, 0.07 ms after. Nothing of any call
    is involved.
    """
    own = dict(os.environ)
    call = Call()
    buf = ctypes.create_string_buffer(b"A=1\0B=2")
    for _ in range(64):
        lib.warren_fn_worker_filtered()
        ctypes.byref(call)
        environment(ctypes.string_at(buf, 7), 2)
        os.environ.clear()
        os.environ.update(own)
        types.ModuleType("__main__")
        exec(compile("import os\nx = str([i for i in range(3)]) + repr({'a': 1}) + f'{os.sep}'\n", "<string>", "exec"), {})


def run(fds):
    """The call itself: PID 1 of its own pid namespace, in its own root."""
    # Its root, files, working directory and descriptors (native/fn-call.c); a call that cannot
    # have them is reported on its error pipe and ends there.
    call = Call()
    lib.warren_fn_prepare(fds, TMPFS_KIB, ctypes.byref(call))
    code = ctypes.string_at(call.code, call.ncode)
    env = environment(ctypes.string_at(call.env, call.nenv), call.count)
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
    try:
        run(fds)
    finally:
        os._exit(1)


serve()
