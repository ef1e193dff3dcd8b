/*
 * libFuzzer: session output in pieces of any sizes (the first bytes choose them). Up to the first
 * marker, exactly what came before it is passed on; with no marker, a prefix of the input that
 * holds back at most a marker's length less one.
 */
#include "../init.h"

static buf_t got;

/* Whether the first n bytes passed on are those of p (none passed on is a match of nothing). */
static int got_is(const char *p, size_t n) { return bused(&got) == n && (n == 0 || !memcmp(got.d + got.off, p, n)); }

static void collect(void *ctx, const char *p, size_t n)
{
	(void)ctx;
	bappend(&got, p, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static const char pat[] = "\n__M__";
	const size_t plen = sizeof pat - 1;
	if (n < 2)
		return 0;
	size_t steps = (size_t)(d[0] % 7) + 1, seed = d[1];
	const char *in = (const char *)d + 2;
	n -= 2;
	scan_t s;
	scan_init(&s, pat, 0);
	bfree(&got);
	size_t off = 0, i = 0;
	while (off < n && !s.marked) {
		size_t take = (seed * (i + 1) * 2654435761u % (steps * 17)) + 1;
		if (take > n - off)
			take = n - off;
		off += scan_feed(&s, in + off, take, collect, NULL);
		i++;
	}
	const char *m = memmem(in, n, pat, plen);
	if (m) {
		size_t before = (size_t)(m - in);
		if (!s.marked || off != before + plen || !got_is(in, before))
			__builtin_trap();
	} else {
		if (s.marked || bused(&got) > n || n - bused(&got) >= plen || !got_is(in, bused(&got)))
			__builtin_trap();
	}
	return 0;
}
