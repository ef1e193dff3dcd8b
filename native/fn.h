/*
 * The per-call isolation of a FnCall worker (native/fn.c): linked into warren-init, and built as
 * libwarren-fn.so for the Python zygote (native/fn-zygote.py), which calls it through ctypes.
 */
#ifndef WARREN_FN_H
#define WARREN_FN_H

#include <stddef.h>

/*
 * In the worker's init or zygote, before it forks a call: the next child forked is PID 1 of a new
 * pid namespace (later children get new ones again). Returns 0 or -errno.
 */
int warren_fn_next_pid_ns(void);

/*
 * In the call's process, PID 1 of its new pid namespace, before its code runs: new mount, IPC and
 * UTS namespaces (unless `unshared`: it was cloned with them), a fresh root (an overlay of the
 * worker's root on a new tmpfs of `tmpfs_kib`, /dev read-only with a new /dev/shm and mqueue, a
 * /proc of its own with the usual paths hidden or read-only), the OOM killer's preference, and
 * CAP_SYS_ADMIN dropped for good. Returns 0, or -errno with warren_fn_error() naming the step.
 */
int warren_fn_isolate(unsigned long tmpfs_kib, int unshared);

const char *warren_fn_error(void);

/*
 * Whether this worker runs under the worker's seccomp filter (warren-init installs it at start,
 * unless the edge started the worker unhardened): then a call adds only what the strict filter
 * adds to it; otherwise the whole strict filter. Set by whoever installed it (warren-init), or told
 * (the zygote, by its argument). Default: not.
 */
void warren_fn_set_worker_filtered(int on);
int warren_fn_worker_filtered(void);

/*
 * The Python zygote's loop (native/fn-serve.c, in libwarren-fn.so only): takes calls from the init
 * on `sock` and forks each; `py_fork` is Python's PyOS_BeforeFork, PyOS_AfterFork_Parent and
 * PyOS_AfterFork_Child, called around each fork as os.fork() calls them (so the caller holds the
 * GIL: ctypes.PyDLL). Returns 1 in a call's child with the call's six descriptors in `fds`, 0 when
 * the init closed `sock`, -1 with errno set when the loop cannot go on; in the zygote it does not
 * return otherwise.
 */
int warren_fn_serve(int sock, int *fds, void (*const *py_fork)(void));

/* What a Python call runs: its code, and its environment ("K=V" entries, `count` of them, a NUL
 * between two; `nenv` bytes in all). */
struct warren_fn_call {
	const char *code;
	size_t ncode;
	const char *env;
	size_t nenv;
	size_t count;
};

/*
 * In a Python call's child, with the descriptors warren_fn_serve gave it (native/fn-call.c): its
 * isolation (warren_fn_isolate, `tmpfs_kib`), the request's files written, its working directory
 * made and entered, stdin, stdout and stderr in place, every other descriptor closed, a session of
 * its own, umask 022. Returns 0 with the code and environment in `out`; a call that cannot be
 * prepared is reported on its error pipe and ended here (exit 127).
 */
int warren_fn_prepare(const int *fds, unsigned long tmpfs_kib, struct warren_fn_call *out);

#endif
