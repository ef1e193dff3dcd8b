/* libFuzzer: any bytes as a spawn request's fields (a warren-hostd line, split at TABs as it splits
 * them). The parser refuses it, naming why, or accepts a spec that tests/spec-check.h finds sound. */
#include "../tests/spec-check.h"

#define MAX_LINE (64 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static char line[MAX_LINE + 1], orig[MAX_LINE + 1];
	static struct spec sp;
	/* warren-hostd never hands the parser a line with a NUL or a newline, nor a longer one. */
	if (n > MAX_LINE || memchr(d, 0, n) || memchr(d, '\n', n))
		return 0;
	memcpy(line, d, n);
	line[n] = 0;
	memcpy(orig, line, n + 1);
	char *f[256];
	int nf = 0;
	for (char *p = line;;) {
		/* warren-hostd refuses a line of more fields (MAX_FIELDS, its tag and command among them). */
		if (nf == 254)
			return 0;
		f[nf++] = p;
		char *t = strchr(p, '\t');
		if (!t)
			break;
		*t = 0;
		p = t + 1;
	}
	const char *bad = NULL;
	if (spawn_parse(&sp, f, nf, &bad) < 0) {
		if (!bad || !*bad)
			__builtin_trap();
		return 0;
	}
	const char *broken = spec_check(&sp, line, orig, n);
	if (broken) {
		fprintf(stderr, "accepted a spec that breaks: %s\n", broken);
		__builtin_trap();
	}
	return 0;
}
