/* The seccomp filter every process in a sandbox runs under (native/seccomp.c). */
#ifndef WARREN_SECCOMP_H
#define WARREN_SECCOMP_H

#include <linux/filter.h>
#include <stddef.h>

/* Room for the longest program warren_seccomp_build makes. */
#define WARREN_SECCOMP_MAX_PROG 1200

enum warren_seccomp_profile {
	/* A FnCall worker's init and zygote: everything a sandbox process may do, and mounts and
	 * namespaces for its calls. */
	WARREN_SECCOMP_WORKER,
	/* Every other sandbox process: the worker's, less mounts, namespaces, some ioctls and sockets. */
	WARREN_SECCOMP_STRICT,
	/* Only what STRICT refuses beyond WORKER, allowing the rest: stacked on WORKER's filter (the
	 * kernel runs both, the most restrictive answer wins) it gives STRICT's answers, at
	 * a quarter of its length to check and compile per FnCall. Alone it protects nothing. */
	WARREN_SECCOMP_NARROW,
};

/* Writes the profile's program to `prog` (WARREN_SECCOMP_MAX_PROG long): its length. */
size_t warren_seccomp_build(struct sock_filter *prog, enum warren_seccomp_profile profile);

/* Installs the profile's filter (with no_new_privs). 0 on success, -1 with errno set. */
int warren_seccomp_install_profile(enum warren_seccomp_profile profile);

/*
 * Installs the filter (with no_new_privs); `strict` adds the mount and namespace denials every
 * sandbox process but a FnCall worker's init and zygote gets. 0 on success, -1 with errno set.
 */
int warren_seccomp_install(int strict);

#endif
