/*
 * Unit tests of the seccomp profiles (seccomp.c, included here for its lists): each profile's
 * program answers every call as its lists say (an oracle written from the rules, not from the
 * program's layout), and the NARROW filter a FnCall adds on top of its worker's filter answers
 * every call as the STRICT filter alone does. The programs are run by a small classic-BPF
 * interpreter over every syscall number, three architectures and the argument values the filters
 * look at, and stacked as the kernel stacks filters (the newest filter first; the lowest action
 * wins, the first seen of equal ones). Run by `make -C native check`.
 */
#include "../seccomp.c"

#include <linux/audit.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>

static int failures;
/* The instructions the last run took. */
static size_t steps;

/* The instructions seccomp.c emits: loads of the data, jumps on a constant, returns. */
static uint32_t run(const struct sock_filter *p, size_t n, const struct seccomp_data *d)
{
	uint32_t a = 0;
	steps = 0;
	for (size_t pc = 0; pc < n; pc++) {
		const struct sock_filter *i = &p[pc];
		steps++;
		switch (i->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			memcpy(&a, (const char *)d + i->k, 4);
			break;
		case BPF_RET | BPF_K:
			return i->k;
		case BPF_JMP | BPF_JEQ | BPF_K:
			pc += a == i->k ? i->jt : i->jf;
			break;
		case BPF_JMP | BPF_JGE | BPF_K:
			pc += a >= i->k ? i->jt : i->jf;
			break;
		case BPF_JMP | BPF_JGT | BPF_K:
			pc += a > i->k ? i->jt : i->jf;
			break;
		case BPF_JMP | BPF_JSET | BPF_K:
			pc += (a & i->k) ? i->jt : i->jf;
			break;
		case BPF_JMP | BPF_JA:
			pc += i->k;
			break;
		default:
			fprintf(stderr, "seccomp-test: instruction %#x not interpreted\n", i->code);
			failures++;
			return 0;
		}
	}
	fprintf(stderr, "seccomp-test: a program ran off its end\n");
	failures++;
	return 0;
}

static int on(const unsigned short *l, size_t n, uint32_t nr)
{
	for (size_t i = 0; i < n; i++)
		if (l[i] == nr)
			return 1;
	return 0;
}

static int on32(const unsigned int *l, size_t n, uint32_t v)
{
	for (size_t i = 0; i < n; i++)
		if (l[i] == v)
			return 1;
	return 0;
}

/* Written out here, not taken from seccomp.c: every namespace a clone could make. */
#define TEST_NS_FLAGS                                                                                \
	(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | \
	 CLONE_NEWCGROUP | CLONE_NEWTIME)

/* What a profile must answer, from the rules at the top of seccomp.c. */
static uint32_t oracle(enum warren_seccomp_profile p, const struct seccomp_data *d)
{
	uint32_t nr = (uint32_t)d->nr, a0 = (uint32_t)d->args[0], a1 = (uint32_t)d->args[1];
	if (d->arch != AUDIT_ARCH_X86_64 || nr >= X32_BIT)
		return DENY_ERRNO;
	if (p != WARREN_SECCOMP_WORKER) {
		if (nr == __NR_clone3)
			return ENOSYS_ERRNO;
		if (on(allowed_worker, N(allowed_worker), nr))
			return DENY_ERRNO;
		if ((nr == __NR_clone && (d->args[0] & TEST_NS_FLAGS)) || (nr == __NR_ioctl && on32(denied_ioctls, N(denied_ioctls), a1)) ||
		    (nr == __NR_socket && (a0 == AF_ALG || a0 == AF_VSOCK)))
			return DENY_ERRNO;
		if (p == WARREN_SECCOMP_NARROW)
			return SECCOMP_RET_ALLOW;
	}
	if (on(allowed, N(allowed), nr) || (p == WARREN_SECCOMP_WORKER && on(allowed_worker, N(allowed_worker), nr)))
		return SECCOMP_RET_ALLOW;
	if (on32(denied, N(denied), nr))
		return DENY_ERRNO;
	return ENOSYS_ERRNO;
}

/* The kernel's order of actions (seccomp.c ACTION_ONLY): lower is more restrictive. */
static int32_t action(uint32_t ret) { return (int32_t)(ret & SECCOMP_RET_ACTION_FULL); }

int main(void)
{
	static struct sock_filter worker[WARREN_SECCOMP_MAX_PROG], strict[WARREN_SECCOMP_MAX_PROG], narrow[WARREN_SECCOMP_MAX_PROG];
	size_t nw = warren_seccomp_build(worker, WARREN_SECCOMP_WORKER);
	size_t ns = warren_seccomp_build(strict, WARREN_SECCOMP_STRICT);
	size_t nn = warren_seccomp_build(narrow, WARREN_SECCOMP_NARROW);
	if (!nw || !ns || !nn || nn >= ns) {
		fprintf(stderr, "seccomp-test: NARROW is %zu instructions, STRICT %zu, WORKER %zu\n", nn, ns, nw);
		failures++;
	}
	const struct sock_filter *progs[] = { worker, strict, narrow };
	const size_t lens[] = { nw, ns, nn };
	/* A few answers written out, so that a list or mask the oracle shares with seccomp.c cannot
	 * be wrong in both: 0x7fff0000 allows, 0x50001 is EPERM, 0x50026 ENOSYS. */
	const struct {
		int profile;
		uint32_t arch, nr;
		uint64_t a0, a1;
		uint32_t want;
	} fixed[] = {
		{ 1, AUDIT_ARCH_X86_64, 0 /* read */, 0, 0, 0x7fff0000u },
		{ 1, AUDIT_ARCH_X86_64, 165 /* mount */, 0, 0, 0x50001u },
		{ 0, AUDIT_ARCH_X86_64, 165 /* mount */, 0, 0, 0x7fff0000u },
		{ 1, AUDIT_ARCH_X86_64, 101 /* ptrace */, 0, 0, 0x50001u },
		{ 0, AUDIT_ARCH_X86_64, 101 /* ptrace */, 0, 0, 0x50001u },
		{ 1, AUDIT_ARCH_X86_64, 435 /* clone3 */, 0, 0, 0x50026u },
		{ 0, AUDIT_ARCH_X86_64, 435 /* clone3 */, 0, 0, 0x7fff0000u },
		{ 1, AUDIT_ARCH_X86_64, 56 /* clone */, 0x40000000 /* CLONE_NEWNET */, 0, 0x50001u },
		{ 1, AUDIT_ARCH_X86_64, 56 /* clone */, 0x11 /* SIGCHLD */, 0, 0x7fff0000u },
		{ 1, AUDIT_ARCH_X86_64, 16 /* ioctl */, 3, 0x40049409u /* FICLONE */, 0x50001u },
		{ 1, AUDIT_ARCH_X86_64, 16 /* ioctl */, 3, 0x5401u /* TCGETS */, 0x7fff0000u },
		{ 1, AUDIT_ARCH_X86_64, 41 /* socket */, 40 /* AF_VSOCK */, 1, 0x50001u },
		{ 1, AUDIT_ARCH_X86_64, 41 /* socket */, 2 /* AF_INET */, 1, 0x7fff0000u },
		{ 1, AUDIT_ARCH_X86_64, 500, 0, 0, 0x50026u },
		{ 1, AUDIT_ARCH_X86_64, 0x40000000u /* x32 read */, 0, 0, 0x50001u },
		{ 1, AUDIT_ARCH_I386, 3 /* read */, 0, 0, 0x50001u },
		{ 2, AUDIT_ARCH_X86_64, 165 /* mount */, 0, 0, 0x50001u },
		{ 2, AUDIT_ARCH_X86_64, 0 /* read */, 0, 0, 0x7fff0000u },
	};
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
		struct seccomp_data d = { .nr = (int)fixed[i].nr, .arch = fixed[i].arch };
		d.args[0] = fixed[i].a0;
		d.args[1] = fixed[i].a1;
		uint32_t got = run(progs[fixed[i].profile], lens[fixed[i].profile], &d);
		if (got != fixed[i].want) {
			fprintf(stderr, "seccomp-test: profile %d nr %u: %#x, want %#x\n", fixed[i].profile, fixed[i].nr, got, fixed[i].want);
			failures++;
		}
	}
	size_t longest[3] = { 0 };
	const uint32_t arches[] = { AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64 };
	/* Values argument 0 and 1 take: clone's flags, ioctl's commands, socket's families. */
	const uint64_t args[] = { 0,
				  SIGCHLD,
				  CLONE_NEWNS | SIGCHLD,
				  CLONE_NEWUSER,
				  CLONE_NEWTIME,
				  CLONE_VM | CLONE_THREAD | CLONE_SIGHAND,
				  (uint64_t)1 << 40,
				  CLONE_NEWPID,
				  CLONE_NEWNET,
				  CLONE_NEWIPC,
				  CLONE_NEWUTS,
				  CLONE_NEWCGROUP,
				  FICLONE,
				  FICLONERANGE,
				  FIDEDUPERANGE,
				  FS_IOC_FSSETXATTR,
				  0xc0c0586du /* XFS_IOC_SWAPEXT */,
				  0x40285881u /* XFS_IOC_EXCHANGE_RANGE */,
				  TIOCSTI,
				  TIOCLINUX,
				  TCGETS,
				  (uint64_t)0xffffffff00000000u | FICLONE,
				  AF_INET,
				  AF_UNIX,
				  AF_ALG,
				  AF_VSOCK };
	size_t nargs = sizeof args / sizeof args[0];
	unsigned long checked = 0, refused = 0;
	for (size_t ai = 0; ai < sizeof arches / sizeof arches[0]; ai++)
		for (uint32_t nr = 0; nr < 1100; nr++)
			for (size_t x = 0; x < nargs; x++)
				for (size_t y = 0; y < nargs; y++) {
					struct seccomp_data d = { .nr = (int)(nr < 1000 ? nr : 0x40000000u + nr - 1000), .arch = arches[ai] };
					d.args[0] = args[x];
					d.args[1] = args[y];
					for (int p = 0; p < 3; p++) {
						uint32_t got = run(progs[p], lens[p], &d), want = oracle((enum warren_seccomp_profile)p, &d);
						if (steps > longest[p])
							longest[p] = steps;
						if (got != want && failures++ < 10)
							fprintf(stderr, "seccomp-test: profile %d arch %#x nr %d args %#llx %#llx: %#x, the rules say %#x\n", p, d.arch, d.nr,
								(unsigned long long)d.args[0], (unsigned long long)d.args[1], got, want);
					}
					uint32_t alone = run(strict, ns, &d);
					/* The newest filter is run first; an equal action does not replace it. */
					uint32_t stacked = run(narrow, nn, &d), older = run(worker, nw, &d);
					if (action(older) < action(stacked))
						stacked = older;
					checked++;
					refused += alone != SECCOMP_RET_ALLOW;
					if (alone != stacked && failures++ < 10)
						fprintf(stderr, "seccomp-test: arch %#x nr %d args %#llx %#llx: STRICT %#x, WORKER+NARROW %#x\n", d.arch, d.nr,
							(unsigned long long)d.args[0], (unsigned long long)d.args[1], alone, stacked);
				}
	/* The comparison means something only if STRICT refuses some and allows some. */
	if (refused == 0 || refused == checked) {
		fprintf(stderr, "seccomp-test: STRICT refused %lu of %lu\n", refused, checked);
		failures++;
	}
	/* A search, not a walk: the kernel runs each new filter over every number (its cache of
	 * answers), and a walk down the lists cost every sandbox's start ~0.1 ms. */
	for (int p = 0; p < 3; p++)
		if (longest[p] > 32) {
			fprintf(stderr, "seccomp-test: profile %d takes up to %zu instructions to an answer\n", p, longest[p]);
			failures++;
		}
	if (failures)
		return 1;
	printf("seccomp-test: ok (%lu cases; STRICT %zu instructions, at most %zu run; NARROW %zu, %zu; WORKER %zu, %zu)\n", checked, ns, longest[1], nn,
	       longest[2], nw, longest[0]);
	return 0;
}
