/*
 * The per-call isolation of a FnCall worker (native/fn.c): linked into warren-init, and built as
 * libwarren-fn.so for the Python zygote (native/fn-zygote.py), which calls it through ctypes.
 */
#ifndef WARREN_FN_H
#define WARREN_FN_H

/*
 * In the process that will supervise one call: new mount, pid, IPC and UTS namespaces, and a
 * fresh root (an overlay of the worker's root under a new tmpfs of `tmpfs_kib`, with /dev read-only,
 * a new /dev/shm and /dev/mqueue). The next child forked is PID 1 of the new pid namespace.
 * Returns 0, or -errno with warren_fn_error() saying which step failed.
 */
int warren_fn_enter(unsigned long tmpfs_kib);

/*
 * In that child, before the call's code runs: a /proc of its own pid namespace with the usual
 * paths hidden or read-only, the OOM killer's preference, and CAP_SYS_ADMIN dropped for good.
 * Returns 0 or -errno (see warren_fn_error()).
 */
int warren_fn_inner(void);

const char *warren_fn_error(void);

#endif
