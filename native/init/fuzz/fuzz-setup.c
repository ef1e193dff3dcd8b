/* libFuzzer: any bytes as the body of a set-up request (`C`). What setup_parse takes lies inside the frame, its paths are absolute, it keeps to its bounds, and it leaks nothing. */
#include "../init.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	field_t *f;
	size_t nf;
	if (parse_fields((const char *)d, n, &f, &nf) < 0)
		return 0;
	struct setup_spec s;
	char err[600];
	const char *lo = (const char *)d, *hi = lo + n;
	if (setup_parse(f, nf, &s, err, sizeof err) == 0) {
		if (s.resolv && (s.resolv < lo || s.resolv + s.nresolv > hi || s.nresolv > SETUP_MAX_RESOLV))
			__builtin_trap();
		if (s.workdir && s.workdir[0] != '/')
			__builtin_trap();
		if (s.nfiles > SETUP_MAX_FILES)
			__builtin_trap();
		for (size_t i = 0; i < s.nfiles; i++) {
			const struct setup_file *x = &s.files[i];
			if (!x->path || x->path[0] != '/' || strlen(x->path) > PATH_MAX + 1 || x->data < lo || x->data + x->n > hi || x->mode > 07777)
				__builtin_trap();
		}
		setup_free(&s);
	} else if (s.files || s.workdir || s.nfiles) {
		__builtin_trap();
	}
	free(f);
	return 0;
}
