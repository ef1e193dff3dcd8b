/*
 * warren-init: the marker scanner of session output: finds the end-of-query markers a session's
 * shell prints (and their tails), passing on what is not a marker (pure; unit-tested and fuzzed).
 */
#include "init.h"

void scan_init(scan_t *s, const char *pat, int want_code)
{
	memset(s, 0, sizeof *s);
	s->plen = strlen(pat);
	memcpy(s->pat, pat, s->plen);
	s->want_code = want_code;
}

/* Scan for the same marker again (a marker line printed once more), dropping what comes first. */
void scan_rearm(scan_t *s)
{
	s->done = s->in_tail = s->marked = 0;
	s->hlen = s->tlen = 0;
	s->drop = 1;
}

/* The marker's tail up to its newline; returns the bytes it took. */
static size_t scan_tail(scan_t *s, const char *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (d[i] == '\n') {
			s->tail[s->tlen] = 0;
			s->in_tail = 0;
			s->marked = 1;
			return i + 1;
		}
		if (s->tlen < sizeof s->tail - 1)
			s->tail[s->tlen++] = d[i];
	}
	return n;
}

/*
 * Feed bytes until a marker (and its tail, with want_code) is complete: then s->marked is set and
 * the bytes taken are returned, for the caller to look at the marker and feed the rest. Bytes that
 * are not part of a marker go to out(ctx, ...) (none: dropped), unless s->drop.
 */
size_t scan_feed(scan_t *s, const char *d, size_t n, scan_out_fn *out, void *ctx)
{
	static char work[CHUNK + 128];
	size_t used = 0;
	if (s->done)
		return n;
	if (s->drop)
		out = NULL;
	while (used < n) {
		if (s->in_tail) {
			used += scan_tail(s, d + used, n - used);
			if (s->marked)
				return used;
			continue;
		}
		size_t take = n - used > CHUNK ? CHUNK : n - used;
		size_t h = s->hlen, tot = h + take;
		memcpy(work, s->hold, h);
		memcpy(work + h, d + used, take);
		s->hlen = 0;
		char *m = memmem(work, tot, s->pat, s->plen);
		if (m) {
			if (m > work && out)
				out(ctx, work, (size_t)(m - work));
			/* the held bytes are shorter than the marker: it ends inside d */
			used += (size_t)(m - work) + s->plen - h;
			s->tlen = 0;
			if (!s->want_code) {
				s->tail[0] = 0;
				s->marked = 1;
				return used;
			}
			s->in_tail = 1;
			continue;
		}
		size_t keep = 0;
		for (size_t k = s->plen - 1 < tot ? s->plen - 1 : tot; k > 0; k--)
			if (!memcmp(work + tot - k, s->pat, k)) {
				keep = k;
				break;
			}
		if (tot - keep && out)
			out(ctx, work, tot - keep);
		memcpy(s->hold, work + tot - keep, keep);
		s->hlen = keep;
		used += take;
	}
	return used;
}
