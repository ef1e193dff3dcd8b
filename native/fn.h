/*
 * The per-call isolation of a FnCall worker (native/fn.c): linked into warren-init, and built as
 * libwarren-fn.so for the Python zygote (native/fn-zygote.py), which calls it through ctypes.
 */
#ifndef WARREN_FN_H
#define WARREN_FN_H

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

#endif
