/* warren-hostd's sandbox spawner, shared by its files: the spec of a spawn and what one file offers the others. */
#ifndef WARREN_SPAWN_INTERNAL_H
#define WARREN_SPAWN_INTERNAL_H

#define _GNU_SOURCE
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ITEMS 64
#define SEP '\x1f'

struct mnt {
	/* type "": a directory made in the mount above it and bound onto itself (dir=); data its mode. */
	char *dest, *type, *source, *data;
	unsigned long flags;
};

struct spec {
	char *root, *sock, *log, *hostname, *cwd, *overlay, *overlaydir, *netns, *maskdir;
	char *uidmap, *gidmap, *layermap;
	int layerns;
	int clone_flags, cgroupns;
	char *cg[MAX_ITEMS];
	int ncg;
	char *cgw[MAX_ITEMS];
	int ncgw;
	struct mnt mounts[MAX_ITEMS];
	int nmounts;
	char *devs[MAX_ITEMS];
	int ndevs;
	char *links[MAX_ITEMS];
	int nlinks;
	char *masks[MAX_ITEMS];
	int nmasks;
	char *ros[MAX_ITEMS];
	int nros;
	struct {
		int res;
		unsigned long long soft, hard;
	} rl[MAX_ITEMS];
	int nrl;
	uint64_t caps;
	int have_caps, nnp;
	char *env[MAX_ITEMS + 1];
	int nenv;
	char *argv[MAX_ITEMS + 1];
	int nargv;
};


/* spawn-child.c: where the child reports the step that failed (a pipe to stage 1 or the parent). */
extern int report_fd;


/* spawn-spec.c */
int spawn_split(char *s, char **parts, int max);
int spawn_parse(struct spec *sp, char **f, int n, const char **bad);

/* spawn.c */
int idmap_mount(const char *src, const char *target, int userns);

/* spawn-child.c */
__attribute__((noreturn)) void spawn_fail(const char *what, const char *arg);
void spawn_mask(const char *path);
__attribute__((noreturn)) void spawn_child(struct spec *sp, int sync, int lfd, int nul, int logfd);
void idmap_lowers(const char *spec, int u);

#endif
