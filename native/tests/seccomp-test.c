/*
 * Unit tests of the seccomp profiles (seccomp.c): the NARROW filter a FnCall adds on top of its
 * worker's filter answers every call as the STRICT filter alone does. The programs are run by a
 * small classic-BPF interpreter over every syscall number, three architectures and the argument
 * values the filters look at, and stacked as the kernel stacks filters (the newest filter first;
 * the lowest action wins, the first seen of equal ones). Run by `make -C native check`.
 */
#define _GNU_SOURCE
#include "seccomp.h"

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

/* The instructions seccomp.c emits: loads of the data, jumps on a constant, returns. */
static uint32_t run(const struct sock_filter *p, size_t n, const struct seccomp_data *d)
{
	uint32_t a = 0;
	for (size_t pc = 0; pc < n; pc++) {
		const struct sock_filter *i = &p[pc];
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

/* The kernel's order of actions (seccomp.c ACTION_ONLY): lower is more restrictive. */
static int32_t action(uint32_t ret) { return (int32_t)(ret & SECCOMP_RET_ACTION_FULL); }

int main(void)
{
	static struct sock_filter worker[WARREN_SECCOMP_MAX_PROG], strict[WARREN_SECCOMP_MAX_PROG], narrow[WARREN_SECCOMP_MAX_PROG];
	size_t nw = warren_seccomp_build(worker, WARREN_SECCOMP_WORKER);
	size_t ns = warren_seccomp_build(strict, WARREN_SECCOMP_STRICT);
	size_t nn = warren_seccomp_build(narrow, WARREN_SECCOMP_NARROW);
	if (nn * 4 > ns) {
		fprintf(stderr, "seccomp-test: NARROW is %zu instructions, STRICT %zu\n", nn, ns);
		failures++;
	}
	const uint32_t arches[] = { AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64 };
	/* Values argument 0 and 1 take: clone's flags, ioctl's commands, socket's families. */
	const uint64_t args[] = { 0,
				  SIGCHLD,
				  CLONE_NEWNS | SIGCHLD,
				  CLONE_NEWUSER,
				  CLONE_NEWTIME,
				  CLONE_VM | CLONE_THREAD | CLONE_SIGHAND,
				  (uint64_t)1 << 40,
				  FICLONE,
				  FIDEDUPERANGE,
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
	if (failures)
		return 1;
	printf("seccomp-test: ok (%lu cases; STRICT %zu instructions, NARROW %zu, WORKER %zu)\n", checked, ns, nn, nw);
	return 0;
}
