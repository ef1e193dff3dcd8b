/*
 * A fixed seccomp-BPF program instead of one compiled by runc's libseccomp at every start: the
 * same protection for a few microseconds instead of milliseconds of CPU per sandbox.
 *
 * Denied with EPERM in every sandbox: reading or steering other processes (ptrace,
 * process_vm_*, pidfd_getfd, kcmp), kernel attack surface no agent needs (bpf, perf_event_open,
 * userfaultfd, io_uring, which also bypasses socket filters), the key management calls (the
 * kernel's keyrings are not namespaced), file handles (open_by_handle_at
 * reads files by inode number, past any path rule), modules, kexec, reboot, swap, clocks,
 * accounting and quotas. Every non-x86_64 entry (i386 int 0x80, x32) is denied too: a filter
 * that checks only x86_64 numbers could otherwise be bypassed through another syscall table.
 *
 * The strict profile (every sandbox process but a FnCall worker's init and zygote, which set up
 * each call's namespaces; the calls themselves add it, see fn.c) also denies mounting and
 * namespaces (mount and the new mount API, pivot_root, unshare, setns, clone with a namespace
 * flag; clone3 answers ENOSYS so libc falls back to clone, whose flags a filter can see), the
 * file ioctls that swap, clone or re-tag extents (landlock cannot stop ioctls on regular files),
 * terminal input injection (TIOCSTI, TIOCLINUX), and AF_ALG and AF_VSOCK sockets.
 */
#define _GNU_SOURCE
#include "seccomp.h"

#include <errno.h>
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#define DENY_ERRNO (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define ENOSYS_ERRNO (SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA))
#define X32_BIT 0x40000000u

/* XFS's extent ioctls (from xfs_fs.h, which needs xfsprogs' headers): _IOWR('X', 109, struct
 * xfs_swapext) is 192 bytes of argument, _IOW('X', 129, struct xfs_exchange_range) 40. */
#define XFS_IOC_SWAPEXT 0xc0c0586du
#define XFS_IOC_EXCHANGE_RANGE 0x40285881u

static const unsigned int denied[] = {
	__NR_ptrace,		 __NR_process_vm_readv, __NR_process_vm_writev, __NR_pidfd_getfd,
	__NR_kcmp,		 __NR_bpf,		__NR_perf_event_open,	__NR_userfaultfd,
	__NR_keyctl,		 __NR_add_key,		__NR_request_key,	__NR_io_uring_setup,
	__NR_io_uring_enter,	 __NR_io_uring_register, __NR_open_by_handle_at, __NR_name_to_handle_at,
	__NR_init_module,	 __NR_finit_module,	__NR_delete_module,	__NR_create_module,
	__NR_query_module,	 __NR_get_kernel_syms,	__NR_kexec_load,	__NR_kexec_file_load,
	__NR_reboot,		 __NR_swapon,		__NR_swapoff,		__NR_acct,
	__NR_settimeofday,	 __NR_clock_settime,	__NR_clock_adjtime,	__NR_adjtimex,
	__NR_quotactl,		 __NR_lookup_dcookie,	__NR_uselib,		__NR_ustat,
	__NR_sysfs,		 __NR__sysctl,		__NR_vhangup,		__NR_syslog,
	__NR_iopl,		 __NR_ioperm,		__NR_nfsservctl,
#ifdef __NR_quotactl_fd
	__NR_quotactl_fd,
#endif
};

static const unsigned int denied_strict[] = {
	__NR_mount,	  __NR_umount2, __NR_pivot_root, __NR_unshare, __NR_setns,	    __NR_fsopen,
	__NR_fsconfig,	  __NR_fsmount, __NR_move_mount, __NR_open_tree, __NR_fspick,
#ifdef __NR_mount_setattr
	__NR_mount_setattr,
#endif
};

static const unsigned int denied_ioctls[] = {
	FICLONE,  FICLONERANGE, FIDEDUPERANGE, FS_IOC_FSSETXATTR, XFS_IOC_SWAPEXT, XFS_IOC_EXCHANGE_RANGE,
	TIOCSTI, TIOCLINUX,
};

#define NS_FLAGS                                                                                     \
	(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | \
	 CLONE_NEWCGROUP | CLONE_NEWTIME)

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_PROG (8 + 2 * N(denied) + 2 * N(denied_strict) + 2 + 5 + 2 + 2 * N(denied_ioctls) + 5 + 1)

/* The low 32 bits of argument i (x86_64 is little-endian). */
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

int warren_seccomp_install(int strict)
{
	struct sock_filter prog[MAX_PROG];
	size_t n = 0;
#define EMIT(s) (prog[n++] = (struct sock_filter)s)
#define LOAD(off) EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off)))
#define RET(v) EMIT(BPF_STMT(BPF_RET | BPF_K, (v)))
/* if A == k: return v (two instructions) */
#define DENY_IF(k, v)                                              \
	do {                                                       \
		EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), 0, 1)); \
		RET(v);                                            \
	} while (0)
	LOAD(offsetof(struct seccomp_data, arch));
	EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
	RET(DENY_ERRNO);
	LOAD(offsetof(struct seccomp_data, nr));
	/* x32 calls carry the x32 bit in nr under the x86_64 arch value. */
	EMIT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1));
	RET(DENY_ERRNO);
	for (size_t i = 0; i < N(denied); i++)
		DENY_IF(denied[i], DENY_ERRNO);
	if (strict) {
		for (size_t i = 0; i < N(denied_strict); i++)
			DENY_IF(denied_strict[i], DENY_ERRNO);
		DENY_IF(__NR_clone3, ENOSYS_ERRNO);
		/* clone: no namespace flag (argument 0). */
		EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3));
		LOAD(ARG_LO(0));
		EMIT(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NS_FLAGS, 0, 1));
		RET(DENY_ERRNO);
		LOAD(offsetof(struct seccomp_data, nr));
		/* ioctl: the kernel takes the command as 32 bits, so only those are compared. */
		EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 1 + 2 * N(denied_ioctls)));
		LOAD(ARG_LO(1));
		for (size_t i = 0; i < N(denied_ioctls); i++)
			DENY_IF(denied_ioctls[i], DENY_ERRNO);
		LOAD(offsetof(struct seccomp_data, nr));
		/* socket(AF_ALG, ...): the kernel's crypto API; socket(AF_VSOCK, ...): a channel to the
		 * hypervisor of the machine Warren runs on (Docker's profile refuses it too). */
		EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 4));
		LOAD(ARG_LO(0));
		EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_ALG, 1, 0));
		EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_VSOCK, 0, 1));
		RET(DENY_ERRNO);
		LOAD(offsetof(struct seccomp_data, nr));
	}
	RET(SECCOMP_RET_ALLOW);
	struct sock_fprog fprog = { .len = (unsigned short)n, .filter = prog };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog);
}
