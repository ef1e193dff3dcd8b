/* warren-hostd's modules share this header: its includes and what one module offers the others. */
#ifndef WARREN_HOSTD_H
#define WARREN_HOSTD_H

#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <linux/btrfs.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "spawn.h"

/* warren-hostd.c: replies on stdout (one line each). */
void reply_ok(const char *tag);
void reply_err(const char *tag, int e, const char *what);

/* hostd-mounts.c: mounts, device nodes, xattrs and btrfs subvolumes (a path must not hold any of `bad`: has_bad). */
int has_bad(const char *s, const char *bad);
void do_overlay(const char *tag, char **f);
void do_idmap(const char *tag, char **f);
void do_erofs(const char *tag, char **f, int n);
void do_tmpfs(const char *tag, char **f);
void do_mknod(const char *tag, char **f);
void do_xattr(const char *tag, char **f);
void do_subvol(const char *tag, char **f, int na);
void do_subvol_delete(const char *tag, char **f);
void do_umount(const char *tag, char **f);

/* hostd-netns.c: network namespaces held open here, and their sysfs. */
void do_netns(const char *tag);
void do_netns_close(const char *tag, char **f);
void do_sysfs(const char *tag, char **f);
/* Whether fd is a namespace held here; into one (0 or -1) and back to the host's (exits if it cannot). */
int netns_is_held(long fd);
int netns_enter(int fd);
void netns_leave(void);

/* hostd-veth.c: a sandbox namespace's veth, addresses and default route, over rtnetlink. */
void do_veth(const char *tag, char **f);

/* hostd-watch.c: processes watched until they end ("* exit PID STARTTIME" events). */
int watch_fd(void);
void do_watch(const char *tag, char **f);
void watch_ready(void);
/* warren-hostd.c reaped the child pid: its watch, if any, is told of. */
void watch_reaped(pid_t pid);

#endif
