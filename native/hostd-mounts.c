/* warren-hostd: mounts (overlay, EROFS, tmpfs, idmapped clones), device nodes and xattrs for layer unpacking, btrfs subvolumes. */
#include "hostd.h"

int has_bad(const char *s, const char *bad)
{
	return strpbrk(s, bad) != NULL;
}

void do_overlay(const char *tag, char **f)
{
	const char *lower = f[0], *upper = f[1], *work = f[2], *target = f[3];
	/* ',' separates mount options; reject rather than mis-parse. */
	if (!*lower || !*upper || !*work || !*target || has_bad(lower, ",") || has_bad(upper, ",:") ||
	    has_bad(work, ",:")) {
		reply_err(tag, EINVAL, "overlay");
		return;
	}
	long page = sysconf(_SC_PAGESIZE);
	if (page <= 0)
		page = 4096;
	size_t need = strlen(lower) + strlen(upper) + strlen(work) + 64;
	char *opts = malloc(need);
	if (!opts) {
		reply_err(tag, ENOMEM, "overlay");
		return;
	}
	int n = snprintf(opts, need, "lowerdir=%s,upperdir=%s,workdir=%s,xino=on", lower, upper, work);
	if (n < 0 || (long)n >= page) {
		free(opts);
		reply_err(tag, E2BIG, "overlay");
		return;
	}
	if (mount("overlay", target, "overlay", 0, opts) < 0)
		reply_err(tag, errno, "overlay");
	else
		reply_ok(tag);
	free(opts);
}

void do_idmap(const char *tag, char **f)
{
	if (!*f[0] || !*f[1]) {
		reply_err(tag, EINVAL, "idmap");
		return;
	}
	int u = idmap_userns_cached(f[2]);
	if (u < 0) {
		reply_err(tag, errno, "idmap: user namespace");
		return;
	}
	if (idmap_mount(f[0], f[1], u) < 0)
		reply_err(tag, errno, "idmap");
	else
		reply_ok(tag);
}

void do_erofs(const char *tag, char **f, int n)
{
	char opts[PATH_MAX + 16];
	if (!*f[0] || !*f[1] || (n == 3 && (!*f[2] || strchr(f[2], ',') || strlen(f[2]) >= PATH_MAX))) {
		reply_err(tag, EINVAL, "erofs");
		return;
	}
	if (n == 3)
		snprintf(opts, sizeof opts, "device=%s", f[2]);
	if (mount(f[0], f[1], "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID, n == 3 ? opts : NULL) < 0)
		reply_err(tag, errno, "erofs");
	else
		reply_ok(tag);
}

void do_tmpfs(const char *tag, char **f)
{
	if (!*f[0]) {
		reply_err(tag, EINVAL, "tmpfs");
		return;
	}
	if (mount("tmpfs", f[0], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f[1]) < 0)
		reply_err(tag, errno, "tmpfs");
	else
		reply_ok(tag);
}

/* Hex-decodes s in place; returns the length, or -1 when it is not even-length hex. */
static long unhex(char *s)
{
	size_t n = strlen(s);
	if (n % 2)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1 || !isxdigit((unsigned char)s[2 * i]) || !isxdigit((unsigned char)s[2 * i + 1]))
			return -1;
		s[i] = (char)v;
	}
	s[n / 2] = 0;
	return (long)(n / 2);
}

void do_mknod(const char *tag, char **f)
{
	char *end;
	long plen = unhex(f[0]);
	unsigned long mode = strtoul(f[2], &end, 8);
	unsigned long maj = strtoul(f[3], NULL, 10), min = strtoul(f[4], NULL, 10);
	mode_t type = !strcmp(f[1], "c") ? S_IFCHR : !strcmp(f[1], "b") ? S_IFBLK : !strcmp(f[1], "p") ? S_IFIFO : 0;
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || *end || mode > 07777 || !type) {
		reply_err(tag, EINVAL, "mknod");
		return;
	}
	if (mknod(f[0], type | (mode_t)mode, makedev(maj, min)) < 0)
		reply_err(tag, errno, "mknod");
	else
		reply_ok(tag);
}

void do_xattr(const char *tag, char **f)
{
	long plen = unhex(f[0]);
	long vlen = unhex(f[2]);
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || vlen < 0 || !*f[1]) {
		reply_err(tag, EINVAL, "xattr");
		return;
	}
	if (lsetxattr(f[0], f[1], f[2], (size_t)vlen, 0) < 0)
		reply_err(tag, errno, "xattr");
	else
		reply_ok(tag);
}

/* A name for a subvolume: one path component. */
static int component_ok(const char *n)
{
	return *n && strlen(n) < BTRFS_PATH_NAME_MAX && !strchr(n, '/') && strcmp(n, ".") && strcmp(n, "..");
}

/*
 * "subvol DIRHEX NAME KIB [UID]": a btrfs subvolume NAME in DIR, its space (data and metadata)
 * limited to KIB by a qgroup the file system enforces (quotas must be enabled on it). With UID, a
 * sandbox's writable layer in it at once: `upper` (owned by UID:UID) and `work` (root's), 0755, so
 * a create makes its disk in one request. On any failure the subvolume goes again.
 */
void do_subvol(const char *tag, char **f, int na)
{
	long plen = unhex(f[0]);
	char *end, *uend = NULL;
	unsigned long long kib = strtoull(f[2], &end, 10);
	unsigned long uid = na == 4 ? strtoul(f[3], &uend, 10) : 0;
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || !component_ok(f[1]) || *end || !kib ||
	    (na == 4 && (!*f[3] || *uend || uid > 0xfffffffeUL))) {
		reply_err(tag, EINVAL, "subvol");
		return;
	}
	int dfd = open(f[0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		reply_err(tag, errno, "subvol: open");
		return;
	}
	struct btrfs_ioctl_vol_args va = { 0 };
	strcpy(va.name, f[1]);
	if (ioctl(dfd, BTRFS_IOC_SUBVOL_CREATE, &va) < 0) {
		reply_err(tag, errno, "subvol: create");
		close(dfd);
		return;
	}
	int sfd = openat(dfd, f[1], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct btrfs_ioctl_qgroup_limit_args la = { 0 }; /* qgroupid 0: the subvolume of the fd */
	la.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
	la.lim.max_rfer = kib * 1024;
	const char *step = "subvol: limit";
	int ok = sfd >= 0 && ioctl(sfd, BTRFS_IOC_QGROUP_LIMIT, &la) == 0;
	if (ok && na == 4) {
		step = "subvol: layer dirs";
		ok = mkdirat(sfd, "upper", 0755) == 0 && fchownat(sfd, "upper", (uid_t)uid, (gid_t)uid, AT_SYMLINK_NOFOLLOW) == 0 &&
		     mkdirat(sfd, "work", 0755) == 0;
	}
	if (!ok) {
		int e = errno;
		ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &va);
		reply_err(tag, e, step);
	} else {
		reply_ok(tag);
	}
	if (sfd >= 0)
		close(sfd);
	close(dfd);
}

/* "subvol-delete DIRHEX NAME": the subvolume and everything in it, at once. */
void do_subvol_delete(const char *tag, char **f)
{
	long plen = unhex(f[0]);
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || !component_ok(f[1])) {
		reply_err(tag, EINVAL, "subvol-delete");
		return;
	}
	int dfd = open(f[0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		reply_err(tag, errno, "subvol-delete: open");
		return;
	}
	struct btrfs_ioctl_vol_args va = { 0 };
	strcpy(va.name, f[1]);
	if (ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &va) < 0 && errno != ENOENT)
		reply_err(tag, errno, "subvol-delete");
	else
		reply_ok(tag);
	close(dfd);
}

void do_umount(const char *tag, char **f)
{
	if (!*f[0]) {
		reply_err(tag, EINVAL, "umount");
		return;
	}
	if (umount2(f[0], MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		reply_err(tag, errno, "umount");
	else
		reply_ok(tag);
}
