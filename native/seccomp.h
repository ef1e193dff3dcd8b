/* The seccomp filter every process in a sandbox runs under (native/seccomp.c). */
#ifndef WARREN_SECCOMP_H
#define WARREN_SECCOMP_H

/*
 * Installs the filter (with no_new_privs); `strict` adds the mount and namespace denials every
 * sandbox process but a FnCall worker's init and zygote gets. 0 on success, -1 with errno set.
 */
int warren_seccomp_install(int strict);

#endif
