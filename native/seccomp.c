/*
 * A fixed seccomp-BPF program instead of one compiled by runc's libseccomp at every start: the
 * same protection for a few microseconds instead of milliseconds of CPU per sandbox.
 *
 * An allow list, Docker's default profile the reference: what programs need (files, memory,
 * processes, signals, time, IPC, sockets, epoll and io_*, landlock) is allowed; a number not on
 * it answers ENOSYS, as on a kernel without that call, so a syscall newer than this list
 * (statmount, listmount, open_tree_attr, ...) is refused and libc and runtimes fall back. The
 * kernel caches a filter's verdict for every call whose answer does not depend on its
 * arguments, so an allowed call costs nothing for the list's length.
 *
 * Known and refused with EPERM, as before the list: reading or steering other processes
 * (ptrace, process_vm_*, pidfd_getfd, kcmp), kernel attack surface no agent needs (bpf,
 * perf_event_open, userfaultfd, io_uring, which also bypasses socket filters), the key
 * management calls (the kernel's keyrings are not namespaced), file handles (open_by_handle_at
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

/* Calls newer than the headers of the machine that builds this (x86_64 numbers). */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_map_shadow_stack
#define __NR_map_shadow_stack 453
#endif
#ifndef __NR_futex_wake
#define __NR_futex_wake 454
#define __NR_futex_wait 455
#define __NR_futex_requeue 456
#endif
#ifndef __NR_mseal
#define __NR_mseal 462
#endif
#ifndef __NR_setxattrat
#define __NR_setxattrat 463
#define __NR_getxattrat 464
#define __NR_listxattrat 465
#define __NR_removexattrat 466
#endif

#define DENY_ERRNO (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define ENOSYS_ERRNO (SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA))
#define X32_BIT 0x40000000u

/* XFS's extent ioctls (from xfs_fs.h, which needs xfsprogs' headers): _IOWR('X', 109, struct
 * xfs_swapext) is 192 bytes of argument, _IOW('X', 129, struct xfs_exchange_range) 40. */
#define XFS_IOC_SWAPEXT 0xc0c0586du
#define XFS_IOC_EXCHANGE_RANGE 0x40285881u

/* What every sandbox process may call (the arguments of ioctl, socket and clone are checked
 * before, in the strict profile). */
static const unsigned short allowed[] = {
	/* files and descriptors */
	__NR_read, __NR_write, __NR_open, __NR_close, __NR_stat, __NR_fstat, __NR_lstat, __NR_poll,
	__NR_lseek, __NR_pread64, __NR_pwrite64, __NR_readv, __NR_writev, __NR_access, __NR_pipe,
	__NR_select, __NR_dup, __NR_dup2, __NR_sendfile, __NR_fcntl, __NR_flock, __NR_fsync,
	__NR_fdatasync, __NR_truncate, __NR_ftruncate, __NR_getdents, __NR_getcwd, __NR_chdir,
	__NR_fchdir, __NR_rename, __NR_mkdir, __NR_rmdir, __NR_creat, __NR_link, __NR_unlink,
	__NR_symlink, __NR_readlink, __NR_chmod, __NR_fchmod, __NR_chown, __NR_fchown, __NR_lchown,
	__NR_umask, __NR_utime, __NR_mknod, __NR_statfs, __NR_fstatfs, __NR_sync, __NR_readahead,
	__NR_setxattr, __NR_lsetxattr, __NR_fsetxattr, __NR_getxattr, __NR_lgetxattr, __NR_fgetxattr,
	__NR_listxattr, __NR_llistxattr, __NR_flistxattr, __NR_removexattr, __NR_lremovexattr,
	__NR_fremovexattr, __NR_getdents64, __NR_fadvise64, __NR_utimes, __NR_openat, __NR_mkdirat,
	__NR_mknodat, __NR_fchownat, __NR_futimesat, __NR_newfstatat, __NR_unlinkat, __NR_renameat,
	__NR_linkat, __NR_symlinkat, __NR_readlinkat, __NR_fchmodat, __NR_faccessat, __NR_pselect6,
	__NR_ppoll, __NR_splice, __NR_tee, __NR_sync_file_range, __NR_vmsplice, __NR_utimensat,
	__NR_fallocate, __NR_dup3, __NR_pipe2, __NR_preadv, __NR_pwritev, __NR_syncfs, __NR_renameat2,
	__NR_copy_file_range, __NR_preadv2, __NR_pwritev2, __NR_statx, __NR_close_range, __NR_openat2,
	__NR_faccessat2, __NR_cachestat, __NR_fchmodat2, __NR_setxattrat, __NR_getxattrat,
	__NR_listxattrat, __NR_removexattrat, __NR_ioctl, __NR_inotify_init, __NR_inotify_add_watch,
	__NR_inotify_rm_watch, __NR_inotify_init1, __NR_fanotify_mark, __NR_epoll_create,
	__NR_epoll_ctl, __NR_epoll_wait, __NR_epoll_pwait, __NR_epoll_create1, __NR_epoll_pwait2,
	__NR_io_setup, __NR_io_destroy, __NR_io_getevents, __NR_io_submit, __NR_io_cancel,
	__NR_io_pgetevents, __NR_eventfd, __NR_eventfd2, __NR_signalfd, __NR_signalfd4,
	__NR_timerfd_create, __NR_timerfd_settime, __NR_timerfd_gettime, __NR_memfd_create,
	/* memory */
	__NR_mmap, __NR_mprotect, __NR_munmap, __NR_brk, __NR_mremap, __NR_msync, __NR_mincore,
	__NR_madvise, __NR_mlock, __NR_munlock, __NR_mlockall, __NR_munlockall, __NR_mlock2,
	__NR_remap_file_pages, __NR_mbind, __NR_set_mempolicy, __NR_get_mempolicy, __NR_pkey_mprotect,
	__NR_pkey_alloc, __NR_pkey_free, __NR_membarrier, __NR_memfd_secret, __NR_process_mrelease,
	__NR_map_shadow_stack, __NR_mseal,
	/* processes, ids, limits, scheduling */
	__NR_clone, __NR_fork, __NR_vfork, __NR_execve, __NR_execveat, __NR_exit, __NR_exit_group,
	__NR_wait4, __NR_waitid, __NR_kill, __NR_tkill, __NR_tgkill, __NR_uname, __NR_getpid,
	__NR_getppid, __NR_gettid, __NR_getuid, __NR_getgid, __NR_geteuid, __NR_getegid, __NR_setuid,
	__NR_setgid, __NR_setpgid, __NR_getpgrp, __NR_setsid, __NR_setreuid, __NR_setregid,
	__NR_getgroups, __NR_setgroups, __NR_setresuid, __NR_getresuid, __NR_setresgid, __NR_getresgid,
	__NR_getpgid, __NR_setfsuid, __NR_setfsgid, __NR_getsid, __NR_capget, __NR_capset,
	__NR_getrlimit, __NR_setrlimit, __NR_prlimit64, __NR_getrusage, __NR_sysinfo, __NR_times,
	__NR_getpriority, __NR_setpriority, __NR_sched_setparam, __NR_sched_getparam,
	__NR_sched_setscheduler, __NR_sched_getscheduler, __NR_sched_get_priority_max,
	__NR_sched_get_priority_min, __NR_sched_rr_get_interval, __NR_sched_setaffinity,
	__NR_sched_getaffinity, __NR_sched_setattr, __NR_sched_getattr, __NR_sched_yield, __NR_prctl,
	__NR_arch_prctl, __NR_personality, __NR_set_thread_area, __NR_get_thread_area,
	__NR_set_tid_address, __NR_set_robust_list, __NR_get_robust_list, __NR_futex, __NR_futex_waitv,
	__NR_futex_wake, __NR_futex_wait, __NR_futex_requeue, __NR_rseq, __NR_seccomp, __NR_getrandom,
	__NR_getcpu, __NR_ioprio_set, __NR_ioprio_get, __NR_pidfd_open, __NR_pidfd_send_signal,
	__NR_chroot, __NR_sethostname, __NR_setdomainname, __NR_landlock_create_ruleset,
	__NR_landlock_add_rule, __NR_landlock_restrict_self, __NR_restart_syscall,
	/* signals and time */
	__NR_rt_sigaction, __NR_rt_sigprocmask, __NR_rt_sigreturn, __NR_rt_sigpending,
	__NR_rt_sigtimedwait, __NR_rt_sigqueueinfo, __NR_rt_sigsuspend, __NR_rt_tgsigqueueinfo,
	__NR_sigaltstack, __NR_pause, __NR_nanosleep, __NR_clock_nanosleep, __NR_getitimer,
	__NR_setitimer, __NR_alarm, __NR_gettimeofday, __NR_time, __NR_clock_gettime,
	__NR_clock_getres, __NR_timer_create, __NR_timer_settime, __NR_timer_gettime,
	__NR_timer_getoverrun, __NR_timer_delete,
	/* System V and POSIX IPC (namespaced per sandbox) */
	__NR_shmget, __NR_shmat, __NR_shmctl, __NR_shmdt, __NR_semget, __NR_semop, __NR_semctl,
	__NR_semtimedop, __NR_msgget, __NR_msgsnd, __NR_msgrcv, __NR_msgctl, __NR_mq_open,
	__NR_mq_unlink, __NR_mq_timedsend, __NR_mq_timedreceive, __NR_mq_notify, __NR_mq_getsetattr,
	/* sockets */
	__NR_socket, __NR_connect, __NR_accept, __NR_accept4, __NR_sendto, __NR_recvfrom,
	__NR_sendmsg, __NR_recvmsg, __NR_sendmmsg, __NR_recvmmsg, __NR_shutdown, __NR_bind,
	__NR_listen, __NR_getsockname, __NR_getpeername, __NR_socketpair, __NR_setsockopt,
	__NR_getsockopt,
};

/* What a FnCall worker's init and zygote may call besides: they build each call's namespaces. */
static const unsigned short allowed_worker[] = {
	__NR_mount,	__NR_umount2,  __NR_pivot_root, __NR_unshare, __NR_setns,	 __NR_fsopen,
	__NR_fsconfig,	__NR_fsmount,  __NR_move_mount, __NR_open_tree, __NR_fspick, __NR_mount_setattr,
	__NR_clone3,
};

/* Known and refused with EPERM (everything else not allowed answers ENOSYS). */
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

static const unsigned int denied_ioctls[] = {
	FICLONE,  FICLONERANGE, FIDEDUPERANGE, FS_IOC_FSSETXATTR, XFS_IOC_SWAPEXT, XFS_IOC_EXCHANGE_RANGE,
	TIOCSTI, TIOCLINUX,
};

#define NS_FLAGS                                                                                     \
	(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | \
	 CLONE_NEWCGROUP | CLONE_NEWTIME)

#define N(a) (sizeof(a) / sizeof((a)[0]))
/* One past the highest syscall number on the lists. */
#define NR_LIMIT 512
/* Each allowed range is 3 instructions at most; there are fewer ranges than allowed calls. */
#define MAX_PROG                                                                                   \
	(8 + 2 * N(allowed_worker) + 2 + 5 + 2 + 2 * N(denied_ioctls) + 5 + 1 +                     \
	 3 * (N(allowed) + N(allowed_worker)) + 2 * N(denied) + 1)
_Static_assert(MAX_PROG <= WARREN_SECCOMP_MAX_PROG, "WARREN_SECCOMP_MAX_PROG is too small");

/* The low 32 bits of argument i (x86_64 is little-endian). */
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

/* For each range lo..hi of consecutive numbers set in `set`: if lo <= nr <= hi, return `ret`
 * (nr in the accumulator). The number of instructions written. */
static size_t emit_ranges(struct sock_filter *prog, const unsigned char *set, unsigned int ret)
{
	size_t n = 0;
	for (unsigned int lo = 0; lo < NR_LIMIT; lo++) {
		if (!set[lo])
			continue;
		unsigned int hi = lo;
		while (hi + 1 < NR_LIMIT && set[hi + 1])
			hi++;
		if (lo == hi) {
			prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, lo, 0, 1);
		} else {
			prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, lo, 0, 2);
			prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, hi, 1, 0);
		}
		prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ret);
		lo = hi;
	}
	return n;
}

size_t warren_seccomp_build(struct sock_filter *prog, enum warren_seccomp_profile profile)
{
	unsigned char allow[NR_LIMIT] = { 0 };
	size_t n = 0;
	int strict = profile != WARREN_SECCOMP_WORKER;
#define EMIT(s) (prog[n++] = (struct sock_filter)s)
#define LOAD(off) EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off)))
#define RET(v) EMIT(BPF_STMT(BPF_RET | BPF_K, (v)))
/* if A == k: return v (two instructions) */
#define DENY_IF(k, v)                                              \
	do {                                                       \
		EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), 0, 1)); \
		RET(v);                                            \
	} while (0)
	for (size_t i = 0; i < N(allowed); i++)
		allow[allowed[i]] = 1;
	if (!strict)
		for (size_t i = 0; i < N(allowed_worker); i++)
			allow[allowed_worker[i]] = 1;
	LOAD(offsetof(struct seccomp_data, arch));
	EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
	RET(DENY_ERRNO);
	LOAD(offsetof(struct seccomp_data, nr));
	/* x32 calls carry the x32 bit in nr under the x86_64 arch value. */
	EMIT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1));
	RET(DENY_ERRNO);
	if (strict) {
		unsigned char deny[NR_LIMIT] = { 0 };
		for (size_t i = 0; i < N(allowed_worker); i++)
			if (allowed_worker[i] != __NR_clone3)
				deny[allowed_worker[i]] = 1;
		n += emit_ranges(prog + n, deny, DENY_ERRNO);
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
	/* Stacked on the worker's filter, which answers everything else as the strict one does. */
	if (profile == WARREN_SECCOMP_NARROW) {
		RET(SECCOMP_RET_ALLOW);
		return n;
	}
	/* The allow list as ranges of consecutive numbers. */
	n += emit_ranges(prog + n, allow, SECCOMP_RET_ALLOW);
	for (size_t i = 0; i < N(denied); i++)
		DENY_IF(denied[i], DENY_ERRNO);
	RET(ENOSYS_ERRNO);
	return n;
}

int warren_seccomp_install_profile(enum warren_seccomp_profile profile)
{
	struct sock_filter prog[WARREN_SECCOMP_MAX_PROG];
	size_t n = warren_seccomp_build(prog, profile);
	struct sock_fprog fprog = { .len = (unsigned short)n, .filter = prog };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog);
}

int warren_seccomp_install(int strict)
{
	return warren_seccomp_install_profile(strict ? WARREN_SECCOMP_STRICT : WARREN_SECCOMP_WORKER);
}
