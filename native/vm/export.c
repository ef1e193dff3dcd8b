/*
 * warren-vmstage: the writable layer of a microVM as an OCI layer tar (a commit). The overlay's
 * upper directory on the writable disk is walked without following any link, its file system
 * frozen meanwhile (the sandbox's writers wait; what is read is one moment's state), and written
 * as ustar with PAX records for long names: whiteouts (0:0 character devices) as `.wh.NAME`,
 * opaque directories with `.wh..wh..opq`, hard links once. The host unpacks it as it unpacks a
 * layer from a registry: nothing here is trusted there.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include "vm.h"

#define BLOCK 512
#define MAX_PATH 16384
#define MAX_DEPTH 256

struct out {
	int fd;
	int failed;
};

/* A hard link's first path, by inode (a small open-addressing table, grown as needed). */
struct seen {
	dev_t dev;
	ino_t ino;
	char *path;
};
static struct seen *seen;
static size_t seen_cap, seen_len;

static void put(struct out *o, const void *p, size_t n)
{
	const char *b = p;
	while (n && !o->failed) {
		ssize_t w = write(o->fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			o->failed = 1;
			return;
		}
		b += w;
		n -= (size_t)w;
	}
}

/* v in octal, zero-padded to n - 1 digits and a NUL; 0 if it does not fit (the field left zeros). */
static int octal(char *field, size_t n, unsigned long long v)
{
	for (size_t i = n - 1; i-- > 0; v >>= 3)
		field[i] = (char)('0' + (v & 7));
	field[n - 1] = 0;
	if (v) {
		memset(field, '0', n - 1);
		return 0;
	}
	return 1;
}

/* A header's checksum: its bytes summed with the checksum field as spaces. */
static void checksum(char *h)
{
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < BLOCK; i++)
		sum += (unsigned char)h[i];
	octal(h + 148, 7, sum);
}

/* One PAX record "LEN key=value\n" appended to buf (len so far in *at); 0 if it did not fit. */
static int pax_record(char *buf, size_t cap, size_t *at, const char *key, const char *value)
{
	size_t body = strlen(key) + strlen(value) + 3; /* ' ' '=' '\n' */
	size_t len = body + 1;
	for (;;) { /* the length counts its own digits */
		char digits[24];
		size_t d = (size_t)snprintf(digits, sizeof digits, "%zu", len);
		if (body + d == len)
			break;
		len = body + d;
	}
	if (*at + len > cap)
		return 0;
	*at += (size_t)snprintf(buf + *at, cap - *at + 1, "%zu %s=%s\n", len, key, value);
	return 1;
}

static void header(struct out *o, const char *path, char type, const struct stat *st, unsigned long long size, const char *link)
{
	char h[BLOCK];
	int longname = strlen(path) > 99, longlink = link && strlen(link) > 99, bigsize = size > 077777777777ull;
	if (longname || longlink || bigsize) {
		static char pax[2 * MAX_PATH + 256];
		size_t at = 0;
		char sz[24];
		snprintf(sz, sizeof sz, "%llu", size);
		if ((longname && !pax_record(pax, sizeof pax - 1, &at, "path", path)) ||
		    (longlink && !pax_record(pax, sizeof pax - 1, &at, "linkpath", link)) || (bigsize && !pax_record(pax, sizeof pax - 1, &at, "size", sz))) {
			o->failed = 1;
			return;
		}
		memset(h, 0, sizeof h);
		memcpy(h, "././@PaxHeader", 14);
		octal(h + 100, 8, 0644);
		octal(h + 108, 8, 0);
		octal(h + 116, 8, 0);
		octal(h + 124, 12, at);
		octal(h + 136, 12, 0);
		h[156] = 'x';
		memcpy(h + 257, "ustar", 6);
		memcpy(h + 263, "00", 2);
		checksum(h);
		put(o, h, BLOCK);
		put(o, pax, at);
		static const char zeros[BLOCK];
		if (at % BLOCK)
			put(o, zeros, BLOCK - at % BLOCK);
	}
	memset(h, 0, sizeof h);
	memcpy(h, path, longname ? 99 : strlen(path));
	octal(h + 100, 8, st->st_mode & 07777);
	octal(h + 108, 8, st->st_uid <= 07777777 ? st->st_uid : 0);
	octal(h + 116, 8, st->st_gid <= 07777777 ? st->st_gid : 0);
	octal(h + 124, 12, bigsize ? 0 : size);
	octal(h + 136, 12, st->st_mtime > 0 ? (unsigned long long)st->st_mtime : 0);
	h[156] = type;
	if (link)
		memcpy(h + 157, link, longlink ? 99 : strlen(link));
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	if (type == '3' || type == '4') {
		octal(h + 329, 8, major(st->st_rdev));
		octal(h + 337, 8, minor(st->st_rdev));
	}
	checksum(h);
	put(o, h, BLOCK);
}

/* The first path of a hard-linked inode, or NULL (it is recorded under `path` then). */
static const char *first_link(const struct stat *st, const char *path)
{
	for (size_t i = 0; i < seen_len; i++)
		if (seen[i].dev == st->st_dev && seen[i].ino == st->st_ino)
			return seen[i].path;
	if (seen_len == seen_cap) {
		size_t cap = seen_cap ? 2 * seen_cap : 64;
		struct seen *grown = realloc(seen, cap * sizeof *grown);
		if (!grown)
			return NULL;
		seen = grown;
		seen_cap = cap;
	}
	char *copy = strdup(path);
	if (copy)
		seen[seen_len++] = (struct seen){ st->st_dev, st->st_ino, copy };
	return NULL;
}

static void file_body(struct out *o, int dir, const char *name, unsigned long long size)
{
	int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		o->failed = 1;
		return;
	}
	static char buf[65536];
	unsigned long long left = size;
	while (left && !o->failed) {
		ssize_t r = read(fd, buf, left < sizeof buf ? left : sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) { /* it shrank: the fs is frozen, so it cannot; fail rather than pad */
			o->failed = 1;
			break;
		}
		put(o, buf, (size_t)r);
		left -= (unsigned long long)r;
	}
	close(fd);
	static const char zeros[BLOCK];
	if (size % BLOCK)
		put(o, zeros, BLOCK - size % BLOCK);
}

/* Writes the entries below directory `dir` (its path in the layer is `path`, "" at the top). */
static void walk(struct out *o, int dir, char *path, size_t plen, int depth)
{
	if (depth > MAX_DEPTH) {
		o->failed = 1;
		return;
	}
	int dfd = dup(dir);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		o->failed = 1;
		return;
	}
	struct dirent *e;
	while (!o->failed && (e = readdir(d))) {
		const char *name = e->d_name;
		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		size_t nlen = strlen(name);
		if (plen + nlen + 6 >= MAX_PATH) { /* room for ".wh." and a '/' */
			o->failed = 1;
			break;
		}
		struct stat st;
		if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			o->failed = 1;
			break;
		}
		memcpy(path + plen, name, nlen + 1);
		if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
			/* A whiteout: the name is gone from the layers below. */
			memmove(path + plen + 4, path + plen, nlen + 1);
			memcpy(path + plen, ".wh.", 4);
			struct stat empty = { .st_mode = 0644 };
			header(o, path, '0', &empty, 0, NULL);
		} else if (S_ISDIR(st.st_mode)) {
			path[plen + nlen] = '/';
			path[plen + nlen + 1] = 0;
			header(o, path, '5', &st, 0, NULL);
			int sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				o->failed = 1;
				break;
			}
			char v[2];
			if (fgetxattr(sub, "trusted.overlay.opaque", v, sizeof v) == 1 && v[0] == 'y') {
				/* Opaque: nothing of the layers below shows through. */
				memcpy(path + plen + nlen + 1, ".wh..wh..opq", 13);
				struct stat empty = { .st_mode = 0644 };
				header(o, path, '0', &empty, 0, NULL);
				path[plen + nlen + 1] = 0;
			}
			walk(o, sub, path, plen + nlen + 1, depth + 1);
			close(sub);
		} else if (S_ISLNK(st.st_mode)) {
			static char target[MAX_PATH];
			ssize_t n = readlinkat(dir, name, target, sizeof target - 1);
			if (n < 0) {
				o->failed = 1;
				break;
			}
			target[n] = 0;
			header(o, path, '2', &st, 0, target);
		} else if (S_ISREG(st.st_mode)) {
			const char *first = st.st_nlink > 1 ? first_link(&st, path) : NULL;
			if (first)
				header(o, path, '1', &st, 0, first);
			else {
				header(o, path, '0', &st, (unsigned long long)st.st_size, NULL);
				file_body(o, dir, name, (unsigned long long)st.st_size);
			}
		} else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode)) {
			header(o, path, S_ISCHR(st.st_mode) ? '3' : S_ISBLK(st.st_mode) ? '4' : '6', &st, 0, NULL);
		}
		/* sockets are no part of a layer */
		path[plen] = 0;
	}
	closedir(d);
}

int vm_export_upper(int rw, int out_fd)
{
	struct out o = { out_fd, 0 };
	int upper = openat(rw, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (upper < 0)
		return 1;
	int frozen = ioctl(rw, FIFREEZE, 0) == 0;
	static char path[MAX_PATH];
	path[0] = 0;
	walk(&o, upper, path, 0, 0);
	if (frozen)
		ioctl(rw, FITHAW, 0);
	close(upper);
	if (o.failed)
		return 1; /* no end marker: the host sees a tar cut short */
	static const char end[2 * BLOCK];
	put(&o, end, sizeof end);
	return o.failed;
}
