/*
 * A fixed seccomp-BPF program instead of one compiled by runc's libseccomp at every start: the
 * same protection for a few microseconds instead of milliseconds of CPU per sandbox.
 *
 * Denied with EPERM: reading or steering other processes (ptrace, process_vm_*, pidfd_getfd,
 * kcmp), kernel attack surface no agent needs (bpf, perf_event_open, userfaultfd), and the key
 * management calls (every sandbox's root is the same host uid, so keys would be shared). Every
 * non-x86_64 entry (i386 int 0x80, x32) is denied too: a filter that checks only x86_64 numbers
 * could otherwise be bypassed through another syscall table.
 */
#define _GNU_SOURCE
#include "seccomp.h"

#include <errno.h>
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define DENY_ERRNO (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define X32_BIT 0x40000000u

static const unsigned int denied[] = {
	__NR_ptrace,	      __NR_process_vm_readv, __NR_process_vm_writev, __NR_pidfd_getfd,
	__NR_kcmp,	      __NR_bpf,		     __NR_perf_event_open,   __NR_userfaultfd,
	__NR_keyctl,	      __NR_add_key,	     __NR_request_key,
};

#define NDENIED (sizeof denied / sizeof denied[0])

int warren_seccomp_install(void)
{
	/* 4 header instructions, 2 per denied call, 2 for x32, 1 allow. */
	struct sock_filter prog[4 + 2 * NDENIED + 3];
	size_t n = 0;
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY_ERRNO);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	for (size_t i = 0; i < NDENIED; i++) {
		prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, denied[i], 0, 1);
		prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY_ERRNO);
	}
	/* x32 calls carry the x32 bit in nr under the x86_64 arch value. */
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY_ERRNO);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog fprog = { .len = (unsigned short)n, .filter = prog };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog);
}

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/*
 * Runs before warren-init's main: nothing in the sandbox, the init included, runs unfiltered.
 * Fails closed: a sandbox whose filter cannot be installed does not start.
 */
__attribute__((constructor)) static void warren_seccomp_at_start(void)
{
	if (warren_seccomp_install() != 0) {
		fprintf(stderr, "warren-init: seccomp: %s\n", strerror(errno));
		_exit(1);
	}
}
