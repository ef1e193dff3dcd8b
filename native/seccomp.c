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

/* The low 32 bits of argument i (x86_64 is little-endian). */
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

/* Answers that depend on a call's arguments (never a seccomp return value of this program: those
 * are ALLOW and ERRNO). */
enum { BY_CLONE_FLAGS = 1, BY_IOCTL_COMMAND, BY_SOCKET_FAMILY };

static const unsigned int denied_families[] = { AF_ALG, AF_VSOCK };

/* A run of call numbers from `start` up to the next run's start, all answered `ret`. */
struct run {
	unsigned int start;
	unsigned int ret;
};

/* The instructions a leaf answering `ret` takes (see emit_leaf). */
static size_t leaf_size(unsigned int ret)
{
	switch (ret) {
	case BY_CLONE_FLAGS:
		return 4;
	case BY_IOCTL_COMMAND:
		return 3 + N(denied_ioctls);
	case BY_SOCKET_FAMILY:
		return 3 + N(denied_families);
	default:
		return 1;
	}
}

/* "If the low 32 bits of argument `arg` are one of `k`, refuse; else allow." */
static size_t emit_one_of(struct sock_filter *prog, unsigned int arg, const unsigned int *k, size_t nk)
{
	size_t n = 0;
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(arg));
	for (size_t i = 0; i < nk; i++)
		prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k[i], (unsigned char)(nk - i), 0);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY_ERRNO);
	return n;
}

/* A number's answer: a return, or the check of its arguments the strict profile makes. */
static size_t emit_leaf(struct sock_filter *prog, unsigned int ret)
{
	switch (ret) {
	case BY_CLONE_FLAGS:
		/* clone: no namespace flag (argument 0). */
		prog[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
		prog[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NS_FLAGS, 0, 1);
		prog[2] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY_ERRNO);
		prog[3] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		return 4;
	case BY_IOCTL_COMMAND:
		/* ioctl: the kernel takes the command as 32 bits, so only those are compared. */
		return emit_one_of(prog, 1, denied_ioctls, N(denied_ioctls));
	case BY_SOCKET_FAMILY:
		/* socket(AF_ALG, ...): the kernel's crypto API; socket(AF_VSOCK, ...): a channel to the
		 * hypervisor of the machine Warren runs on (Docker's profile refuses it too). */
		return emit_one_of(prog, 0, denied_families, N(denied_families));
	default:
		prog[0] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ret);
		return 1;
	}
}

/* The instructions emit_tree writes for runs lo..hi-1. */
static size_t tree_size(const struct run *r, size_t lo, size_t hi)
{
	if (hi - lo == 1)
		return leaf_size(r[lo].ret);
	size_t mid = lo + (hi - lo) / 2, left = tree_size(r, lo, mid);
	return (left > 255 ? 2 : 1) + left + tree_size(r, mid, hi);
}

/*
 * A binary search over the runs lo..hi-1 (nr in the accumulator) down to each run's answer: a
 * call number takes a dozen instructions to it, not a walk down the lists. The kernel runs a new
 * filter over every call number to cache the answers that do not depend on arguments, so a walk
 * down the lists cost each sandbox's start ~0.1 ms more. A node is "if nr >= the right half's
 * first number, jump over the left half" (through an unconditional jump when the left half is
 * past an 8-bit jump). The number of instructions written.
 */
static size_t emit_tree(struct sock_filter *prog, const struct run *r, size_t lo, size_t hi)
{
	if (hi - lo == 1)
		return emit_leaf(prog, r[lo].ret);
	size_t mid = lo + (hi - lo) / 2, left = tree_size(r, lo, mid), n = 0;
	if (left > 255) {
		prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, r[mid].start, 0, 1);
		prog[n++] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, (unsigned int)left);
	} else {
		prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, r[mid].start, (unsigned char)left, 0);
	}
	n += emit_tree(prog + n, r, lo, mid);
	return n + emit_tree(prog + n, r, mid, hi);
}

/* What a profile answers call number `nr` (x86_64; NR_LIMIT and past: unknown). */
static unsigned int answer(enum warren_seccomp_profile profile, unsigned int nr)
{
	int strict = profile != WARREN_SECCOMP_WORKER;
	if (strict) {
		if (nr == __NR_clone3)
			/* libc falls back to clone, whose flags a filter can see. */
			return ENOSYS_ERRNO;
		for (size_t i = 0; i < N(allowed_worker); i++)
			if (nr == allowed_worker[i])
				return DENY_ERRNO;
		if (nr == __NR_clone)
			return BY_CLONE_FLAGS;
		if (nr == __NR_ioctl)
			return BY_IOCTL_COMMAND;
		if (nr == __NR_socket)
			return BY_SOCKET_FAMILY;
	}
	/* Stacked on the worker's filter, which answers everything else as the strict one does. */
	if (profile == WARREN_SECCOMP_NARROW)
		return SECCOMP_RET_ALLOW;
	for (size_t i = 0; i < N(allowed); i++)
		if (nr == allowed[i])
			return SECCOMP_RET_ALLOW;
	if (!strict)
		for (size_t i = 0; i < N(allowed_worker); i++)
			if (nr == allowed_worker[i])
				return SECCOMP_RET_ALLOW;
	for (size_t i = 0; i < N(denied); i++)
		if (nr == denied[i])
			return DENY_ERRNO;
	return ENOSYS_ERRNO;
}

size_t warren_seccomp_build(struct sock_filter *prog, enum warren_seccomp_profile profile)
{
	size_t n = 0;
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY_ERRNO);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	/* x32 calls carry the x32 bit in nr under the x86_64 arch value. */
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DENY_ERRNO);
	/* Every number's answer as runs of equal answers, searched as a tree (an answer by the
	 * arguments is a run of its own number). */
	struct run runs[NR_LIMIT + 1];
	size_t nruns = 0;
	for (unsigned int nr = 0; nr <= NR_LIMIT; nr++) {
		unsigned int ret = nr < NR_LIMIT ? answer(profile, nr) : profile == WARREN_SECCOMP_NARROW ? SECCOMP_RET_ALLOW : ENOSYS_ERRNO;
		if (!nruns || runs[nruns - 1].ret != ret || ret < SECCOMP_RET_ERRNO)
			runs[nruns++] = (struct run){ nr, ret };
	}
	/* The lists are fixed: a program that would not fit is a change to them this must outgrow
	 * (the test builds every profile). Installing an empty program fails, closed. */
	if (n + tree_size(runs, 0, nruns) > WARREN_SECCOMP_MAX_PROG)
		return 0;
	return n + emit_tree(prog + n, runs, 0, nruns);
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
