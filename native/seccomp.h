/* The seccomp filter warren-init puts on itself, and so on every process in the sandbox. */
#ifndef WARREN_SECCOMP_H
#define WARREN_SECCOMP_H

/* Installs the filter; 0 on success, -1 with errno set. */
int warren_seccomp_install(void);

#endif
