/* libFuzzer: any bytes as a frame body. Fields lie inside it and cover it; field helpers never read past a value. */
#include "../init.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	field_t *f;
	size_t nf;
	if (parse_fields((const char *)d, n, &f, &nf) < 0)
		return 0;
	size_t covered = 0;
	for (size_t i = 0; i < nf; i++) {
		if (f[i].v < (const char *)d || f[i].v + f[i].n > (const char *)d + n)
			__builtin_trap();
		covered += 5 + (size_t)f[i].n;
		unsigned long long v;
		(void)fnum(&f[i], i % 2 ? 8 : 10, ~0ULL, &v);
		char *p = fpath(&f[i]);
		if (p && (p[0] != '/' || strlen(p) > (size_t)f[i].n + 1))
			__builtin_trap();
		free(p);
	}
	if (covered != n)
		__builtin_trap();
	free(f);
	return 0;
}
