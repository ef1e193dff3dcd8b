#ifndef WARREN_SPAWN_H
#define WARREN_SPAWN_H

#include <poll.h>
#include <sys/types.h>

#define SPAWN_MAX_PENDING 256

/*
 * "TAG spawn KEY=VALUE..." (fields f[0..n-1]): starts a sandbox without waiting for it; the reply
 * ("TAG ok PID STARTTIME", STARTTIME 0 when the init is gone already, or "TAG err ERRNO MSG") is printed by spawn_ready, or at once on a bad request.
 */
void spawn_start(const char *tag, char **f, int n);
/* The fds to poll for spawns in flight (at most max); returns how many were filled in. */
int spawn_pollfds(struct pollfd *p, int max);
/* Handles the ready ones among the n fds spawn_pollfds filled in. */
void spawn_ready(struct pollfd *p, int n);
/* A listening Unix socket bound at path, any old file there replaced (warren-hostd.c). */
int listen_at(const char *path);
/* A user namespace whose uid and gid maps are MAP ("IN:OUT:N"), as an fd (for idmapped mounts). */
int idmap_userns(const char *map);
/* The same, kept for reuse (the fd belongs to the cache: do not close it). */
int idmap_userns_cached(const char *map);
/* A clone of the mount at src, idmapped through userns, nodev and nosuid, mounted at target. */
int idmap_mount(const char *src, const char *target, int userns);
/* Spawns in flight. */
int spawn_busy(void);
/* A live process's start time (field 22 of /proc/PID/stat); 0 when it is gone or a zombie (hostd-watch.c). */
unsigned long long proc_start_time(pid_t pid);

#endif
