/*
 * warren-init's modules share this header: the protocol's constants, the objects a connection,
 * a command and a session are, the state the event loop owns, and the functions one module
 * offers the others (the frame kinds are in protocol.h, generated). See init/main.c for the loop and docs/init-protocol.md for the protocol.
 */
#ifndef WARREN_INIT_H
#define WARREN_INIT_H

#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fn.h"
#include "seccomp.h"
#include "protocol.h"

#define LISTEN_FD 3
#define HIGH_WATER (256 * 1024)
#define CHUNK (64 * 1024)
#define GRACE_MS 200
#define SESS_INT_MS 500
#define SESS_KILL_MS 2000
#define SESS_SYNC_MS 300
#define SESS_GO_MS 2000
#define SESS_BOOT_MS 15000
#define LINGER_MS 10000
#define L_MAX_ENTRIES 100000
#define L_MAX_DEPTH 256
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* kill_tree: which processes (proc.c) */
#define KT_GROUP 1
#define KT_SELF 2
#define KT_DESC 4
#define KT_SID 8

/* Byte buffer; live data is d[off..len). */
typedef struct {
	char *d;
	size_t off, len, cap;
} buf_t;

/* Field parser. Values point into the frame; valid only while it is. */
typedef struct {
	unsigned char k;
	const char *v;
	uint32_t n;
} field_t;

struct spawn_args {
	char **argv;
	char **env; /* NULL terminated, room for 3 more */
	size_t nenv;
	char *cwd;
	char *user;
	/* A terminal of this size (cols, rows) for its stdin, stdout and stderr: see spawn_pty. */
	unsigned short cols, rows;
	int pty;
};

struct pwent {
	char *name, *home;
	uid_t uid;
	gid_t gid;
};

enum { CS_REQ, CS_OP, CS_FINAL, CS_LINGER };

struct cmd;
struct sess;
struct xop;
struct lst;

struct conn {
	struct conn *next;
	int fd, state, gone, rd_eof;
	/* Kept for more requests (`Y`): each operation's end is `y`, then the next request. */
	int reuse;
	char op;
	buf_t in, out;
	struct cmd *cmd;
	struct sess *sess;
	struct xop *xop;
	int ffd;
	struct lst *ls;
	int64_t linger_until;
	size_t ipart; /* bytes left of an `i` frame whose payload is being streamed */
};

struct cmd {
	struct cmd *next;
	pid_t pid;
	int in_fd, out_fd, err_fd, ep_fd;
	buf_t inb;
	int in_eof, failed, exited, status, timed_out, finishing, done;
	/* Its stdin, stdout and stderr are a terminal: out_fd is the terminal's master side. */
	int pty;
	struct conn *conn;
	int64_t deadline, grace;
	/* FnCall (op F): pid is the call's PID 1; a zygote's call reports it on st_fd. */
	int fn, st_fd, kill_pending, zqueued;
	char st[64];
	size_t stn;
	/* The call's side of its descriptors (request, stdin, stdout, stderr, error report,
	 * status), held while it waits for the zygote. */
	int cfd[6];
};

typedef struct {
	char pat[64];
	size_t plen;
	int want_code, in_tail, done;
	/* a marker was seen (the tail is in tail); what precedes the next one is dropped */
	int marked, drop;
	char hold[64];
	size_t hlen;
	char tail[24];
	size_t tlen;
} scan_t;

/* Where a scanner passes the bytes that are not a marker. */
typedef void scan_out_fn(void *ctx, const char *p, size_t n);
enum { SS_SPAWN, SS_BOOT, SS_IDLE, SS_BUSY, SS_DEAD };

struct sess {
	struct sess *next;
	int id;
	pid_t pid;
	int in_fd, out_fd, err_fd, ep_fd;
	buf_t inb;
	int state, exited, status, deleted, freeme;
	struct conn *conn;
	scan_t so, se;
	char no[40], ne[40]; /* the query's marker nonces, stdout's and stderr's */
	/* started: bash runs the query's line ("go" seen); ended: the line's own stdout marker seen,
	 * with code; sync: 1 the sync line waits for SIGINT to reach bash, 2 it is written;
	 * ipending: SIGINT waits for "go" */
	int started, ended, code, sync;
	int64_t boot_until, deadline, istage_until, grace, sync_until, ipend_until;
	int istage, ipending, timed_out;
};

struct xop {
	struct xop *next;
	pid_t pid;
	struct conn *conn;
	int done;
};

/* A set-up request (`C`), checked by setup_parse: pointers into its frame, paths allocated. */
#define SETUP_MAX_FILES 4096
#define SETUP_MAX_RESOLV 4096
#define SETUP_MAX_USER 256
struct setup_file {
	char *path;
	const char *data;
	uint32_t n;
	int has_mode;
	mode_t mode;
};
struct setup_spec {
	const char *resolv; /* NULL: none */
	uint32_t nresolv;
	char *workdir; /* NULL: none */
	struct setup_file *files;
	size_t nfiles;
};

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* Shared state (each defined in the file that owns it). */
extern int64_t now_ms;
extern struct rlimit saved_nofile;
/* The signals the init ignores. Every other disposition is the default (the init resets them all
 * at its start, whatever its spawner left), so a command's child resets only these before its exec. */
extern const int init_ignored[4];
extern buf_t fb;
extern int child_ep;
extern struct conn *conns;
extern struct cmd *cmds;
extern struct sess *sesss;
extern struct xop *xops;
extern int next_sess_id;
extern int64_t trim_at;
extern char rbuf[CHUNK];
extern int fn_mode;
extern unsigned long fn_tmpfs_kib;
extern pid_t zy_pid;
extern int zy_fd;

/* buf.c */
int64_t mono(void);
void *xrealloc(void *p, size_t n);
char *xstrndup(const char *s, size_t n);
void put32(char *p, uint32_t v);
uint32_t get32(const char *p);
size_t bused(const buf_t *b);
void breserve(buf_t *b, size_t extra);
void bappend(buf_t *b, const void *p, size_t n);
void bfree(buf_t *b);
void bconsume(buf_t *b, size_t n);
int pipe_drain(int fd, buf_t *b);
void set_nonblock(int fd);

/* fields.c */
void fb_reset(void);
void fb_add(char k, const void *v, size_t n);
void fb_str(char k, const char *s);
void fb_num(char k, long long v);
int parse_fields(const char *p, size_t n, field_t **out, size_t *cnt);
const field_t *fget(const field_t *f, size_t n, char k);
int fhasnul(const field_t *f);
int fnum(const field_t *f, int base, unsigned long long max, unsigned long long *out);
int fflag(const field_t *f, size_t n, char k);
char *fpath(const field_t *f);
const char *pbase(const char *p);

/* proc.c */
void kill_tree(pid_t root, int sig, int flags);

/* users.c */
#define PASSWD_FILE "/etc/passwd"
#define GROUP_FILE "/etc/group"
int all_digits(const char *s);
int pw_lookup(const char *passwd, const char *name, uid_t uid, struct pwent *out);
int user_resolve(char *user, struct pwent *pw, int *found);
size_t user_groups(const char *group, const char *name, gid_t primary, gid_t *gs, size_t max);

/* spawn.c */
void spawn_args_free(struct spawn_args *sa);
int spawn_args_build(const field_t *f, size_t nf, struct spawn_args *sa);
void __attribute__((noreturn, format(printf, 2, 3))) child_fail(int err, const char *fmt, ...);
void __attribute__((noreturn)) child_main(struct spawn_args *sa, int in_r, int out_w, int err_w, int ep, int ctty);
pid_t fork_child(struct spawn_args *sa, int in, int out, int err, int pep[2], int ctty);
pid_t spawn(struct spawn_args *sa, int want_stdin, int fds[4]);

/* pty.c */
pid_t spawn_pty(struct spawn_args *sa, int fds[4]);
int pty_parse_size(const char *p, size_t n, unsigned short *cols, unsigned short *rows);
int pty_resize(int master, unsigned short cols, unsigned short rows);
int read_ep(int *epfd, int *err, char *msg, size_t msz);

/* conn.c */
int clive(const struct conn *c);
int cbp(const struct conn *c);
size_t chunk_room(const struct conn *c);
void conn_flush(struct conn *c);
void conn_send(struct conn *c, char t, const void *p, size_t n);
void conn_final(struct conn *c, char t, const void *p, size_t n);
void __attribute__((format(printf, 3, 4))) conn_fail(struct conn *c, int err, const char *fmt, ...);
void conn_done(struct conn *c);

/* commands.c */
void cmd_close_stdin(struct cmd *m);
void cmd_close_out(struct cmd *m);
void fb_status(int status, int timed_out);
ssize_t cmd_read(struct cmd *m, int which);
void cmd_drain_final(struct cmd *m);
void cmd_ep(struct cmd *m);
void cmd_write_stdin(struct cmd *m);
void cmd_exited(struct cmd *m, int status);
void op_exec(struct conn *c, const field_t *f, size_t nf);
void op_signal(struct conn *c, const field_t *f, size_t nf);

/* scan.c */
void scan_init(scan_t *s, const char *pat, int want_code);
void scan_rearm(scan_t *s);
size_t scan_feed(scan_t *s, const char *d, size_t n, scan_out_fn *out, void *ctx);

/* sessions.c */
void sess_close_pipes(struct sess *s);
void sess_check(struct sess *s);
void sess_exited(struct sess *s, int status);
void sess_kill(struct sess *s);
void sess_read(struct sess *s, int which);
void sess_write(struct sess *s);
void sess_sync(struct sess *s);
void sess_sigint(struct sess *s);
void sess_interrupt(struct sess *s);
void sess_ep(struct sess *s);
void op_new_session(struct conn *c, const field_t *f, size_t nf);
void op_query(struct conn *c, const field_t *f, size_t nf);
void op_delete_session(struct conn *c, const field_t *f, size_t nf);

/* setup-spec.c */
int setup_parse(const field_t *f, size_t nf, struct setup_spec *s, char *err, size_t esz);
void setup_free(struct setup_spec *s);

/* setup.c */
void op_setup(struct conn *c, const field_t *f, size_t nf);

/* files.c */
struct owner {
	int set;
	uid_t uid;
	gid_t gid;
};
int owner_get(const field_t *f, size_t nf, struct owner *o, char *err, size_t esz);
int file_create(const char *p, int has_mode, mode_t mode, const struct owner *o, int parents, int *fdp, char *err, size_t esz);
int mkdir_p(const char *path, mode_t mode, const struct owner *o, const char **what);
void fb_entry(const char *path, const char *name, const struct stat *st, int dirfd, const char *rel);
void op_stat(struct conn *c, const field_t *f, size_t nf);
void op_mkdir(struct conn *c, const field_t *f, size_t nf);
void op_rename(struct conn *c, const field_t *f, size_t nf);
void op_read(struct conn *c, const field_t *f, size_t nf);
int read_pump(struct conn *c);
void op_write(struct conn *c, const field_t *f, size_t nf);
void write_chunk(struct conn *c, const char *d, size_t n);
void write_end(struct conn *c);

/* xattrs.c: at most this many attributes a path, of at most this many bytes each (E2B's file
 * metadata takes 4 KiB in all). */
#define XATTR_COUNT_MAX 64
#define XATTR_VALUE_MAX 4096
void fb_xattrs(const char *path);
void op_attrs(struct conn *c, const field_t *f, size_t nf);

/* list.c */
void lst_free(struct lst *ls);
void op_list(struct conn *c, const field_t *f, size_t nf);
int list_pump(struct conn *c);

/* delete.c */
void op_delete(struct conn *c, const field_t *f, size_t nf);
void xop_exited(struct xop *x, int status);

/* fncall.c */
void fn_close_cfds(struct cmd *m);
void zy_dead(void);
void zy_readable(void);
void op_fn(struct conn *c, const char *p, size_t n, const field_t *f, size_t nf);
void fn_status(struct cmd *m);
void fn_kill(struct cmd *m);

/* dispatch.c */
void conn_read(struct conn *c, short rev);
int conn_wants_input(const struct conn *c);
void cleanup(void);
void reap(void);

#endif
