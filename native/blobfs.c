
// warren-blobfs: a read-only FUSE view of the layer data files in a blob store, read on demand.
//
//   warren-blobfs MOUNTPOINT --url URL --sources DIR --cache DIR --max-bytes N [--readahead BLOCKS]
//                 [--readahead-run BLOCKS] [--threads N]
//
// The view is one flat directory of `<hex>.data` files. A name is found without listing the
// store: from the node's cache (a file cached before, also with the store down), from a source
// file Warren wrote (`<sources>/<hex>.src`: "SIZE URL", for stores that do not name files by
// layer, such as a registry's blobs), or by one HEAD of `URL/<hex>.data`. Reads fetch the
// missing 1 MiB blocks they touch with HTTP range requests into a sparse cache file
// (`<cache>/<hex>.data`, with a map of the blocks present in `<hex>.map`); a block is fetched
// once, by one reader, and served from the cache after that. When the cache holds more than --max-bytes, the least recently read blocks of files
// nobody has open are punched out. What the store gets as `Authorization` comes from
// WARREN_BLOB_AUTH (e.g. "Bearer KEY" or "Basic ...").
//
// Every block is checked as it arrives against its sha256 in `<sources>/<hex>.blocks` (32 bytes
// per 1 MiB block, checked by Warren against the layer digest) before it is written to the cache:
// a block that does not match is never kept, and the read fails.
//
// The map of a block is written after its data, so a killed daemon leaves a consistent cache;
// after a host crash the maps are trusted only if the last exit was clean (synced) or the boot
// is the same.
//
// This file: the FUSE operations and main; fetching is in blobfs-fetch.c, the blobs and the cache
// in blobfs-cache.c.
#include "blobfs.h"

struct blobfs g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

void logf_(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02dZ warren-blobfs: %s\n", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
          tm.tm_min, tm.tm_sec, buf);
}

int valid_hex(const char *s, size_t n) {
  if (n != 64) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

/* `<hex>.data` -> hex, or NULL. */
static int parse_name(const char *name, char hex[65]) {
  size_t n = strlen(name);
  if (n != NAME_LEN || strcmp(name + 64, ".data") != 0 || !valid_hex(name, 64)) return 0;
  memcpy(hex, name, 64);
  hex[64] = 0;
  return 1;
}

uint64_t block_bytes(const struct blob *b, uint32_t i) {
  uint64_t start = (uint64_t)i * BLOCK;
  return b->size - start < BLOCK ? b->size - start : BLOCK;
}


static const double FOREVER = 86400.0 * 365;

static void fill_attr(fuse_ino_t ino, const struct blob *b, struct stat *st) {
  memset(st, 0, sizeof *st);
  st->st_ino = ino;
  if (!b) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
    return;
  }
  st->st_mode = S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = (off_t)b->size;
  st->st_blocks = (blkcnt_t)((b->size + 511) / 512);
  st->st_blksize = (blksize_t)BLOCK;
}

static void op_init(void *data, struct fuse_conn_info *conn) {
  (void)data;
  if (conn->capable & FUSE_CAP_ASYNC_DIO) conn->want |= FUSE_CAP_ASYNC_DIO;
  // Reads are answered by splicing the cache file's pages to the kernel, not copying them.
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
  conn->max_readahead = BLOCK;
  conn->max_background = 64;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  char hex[65], url[4096];
  if (parent != FUSE_ROOT_ID || !parse_name(name, hex)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  pthread_mutex_lock(&g.mu);
  struct blob *b = find_blob(hex);
  pthread_mutex_unlock(&g.mu);
  if (!b) {
    uint64_t size = 0;
    if (!source_of(hex, url, sizeof url, &size)) {
      int err = head_size(url, &size);
      if (err) {
        fuse_reply_err(req, -err);
        return;
      }
    }
    pthread_mutex_lock(&g.mu);
    b = find_blob(hex);
    if (!b) b = open_blob(hex, size, url, 0);
    pthread_mutex_unlock(&g.mu);
    if (!b) {
      fuse_reply_err(req, EIO);
      return;
    }
  }
  struct fuse_entry_param e = {.ino = b->ino, .attr_timeout = FOREVER, .entry_timeout = FOREVER};
  fill_attr(e.ino, b, &e.attr);
  fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  struct stat st;
  pthread_mutex_lock(&g.mu);
  struct blob *b = blob_at(ino);
  pthread_mutex_unlock(&g.mu);
  if (ino != FUSE_ROOT_ID && !b) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fill_attr(ino, b, &st);
  fuse_reply_attr(req, &st, ino == FUSE_ROOT_ID ? 1.0 : FOREVER);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  pthread_mutex_lock(&g.mu);
  struct blob *b = blob_at(ino);
  if (b) b->opens++;
  pthread_mutex_unlock(&g.mu);
  if (!b) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fi->keep_cache = 1; // the data never changes
  fi->noflush = 1;
  fuse_reply_open(req, fi);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  pthread_mutex_lock(&g.mu);
  struct blob *b = blob_at(ino);
  if (b && b->opens > 0 && --b->opens == 0) trim_locked();
  pthread_mutex_unlock(&g.mu);
  fuse_reply_err(req, 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)fi;
  pthread_mutex_lock(&g.mu);
  struct blob *b = blob_at(ino);
  pthread_mutex_unlock(&g.mu);
  if (!b) {
    fuse_reply_err(req, EBADF);
    return;
  }
  if (off < 0 || (uint64_t)off >= b->size || size == 0) {
    fuse_reply_buf(req, NULL, 0);
    return;
  }
  if ((uint64_t)off + size > b->size) size = (size_t)(b->size - (uint64_t)off);
  int err = ensure(b, (uint32_t)((uint64_t)off / BLOCK), (uint32_t)(((uint64_t)off + size - 1) / BLOCK));
  if (err) {
    fuse_reply_err(req, -err);
    return;
  }
  // The blocks stay while the file is open (only closed files' blocks are evicted).
  struct fuse_bufvec v = FUSE_BUFVEC_INIT(size);
  v.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY;
  v.buf[0].fd = b->fd;
  v.buf[0].pos = off;
  fuse_reply_data(req, &v, FUSE_BUF_SPLICE_MOVE);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)fi;
  if (ino != FUSE_ROOT_ID) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  char *buf = malloc(size);
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  size_t used = 0;
  pthread_mutex_lock(&g.mu);
  // Only the files known here: the store is never listed.
  for (size_t i = (size_t)off; i < g.nblobs + 2; i++) {
    char name[80];
    struct stat st = {0};
    if (i == 0) strcpy(name, ".");
    else if (i == 1) strcpy(name, "..");
    else snprintf(name, sizeof name, "%s.data", g.blobs[i - 2]->hex);
    st.st_ino = i < 2 ? FUSE_ROOT_ID : i;
    st.st_mode = i < 2 ? S_IFDIR : S_IFREG;
    size_t n = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)i + 1);
    if (n > size - used) break;
    used += n;
  }
  pthread_mutex_unlock(&g.mu);
  fuse_reply_buf(req, buf, used);
  free(buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
  (void)ino;
  struct statvfs s = {.f_bsize = BLOCK, .f_frsize = BLOCK, .f_namemax = 255};
  pthread_mutex_lock(&g.mu);
  s.f_blocks = g.cached / BLOCK;
  s.f_files = g.nblobs + 1;
  pthread_mutex_unlock(&g.mu);
  fuse_reply_statfs(req, &s);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .open = op_open,
    .release = op_release,
    .read = op_read,
    .readdir = op_readdir,
    .statfs = op_statfs,
};

static void usage(void) {
  fprintf(stderr, "usage: warren-blobfs MOUNTPOINT --url URL --sources DIR --cache DIR --max-bytes N [--readahead BLOCKS] [--readahead-run BLOCKS] "
                  "[--threads N]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *mnt = NULL;
  unsigned threads = 16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--url") && v) g.url = v, i++;
    else if (!strcmp(a, "--cache") && v) g.cache = v, i++;
    else if (!strcmp(a, "--sources") && v) g.sources = v, i++;
    else if (!strcmp(a, "--max-bytes") && v) g.max_bytes = strtoull(v, NULL, 10), i++;
    else if (!strcmp(a, "--threads") && v) threads = (unsigned)strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--readahead") && v) ahead_max = (uint32_t)strtoul(v, NULL, 10), i++;
    else if (!strcmp(a, "--readahead-run") && v) ahead_run = (uint32_t)strtoul(v, NULL, 10), i++;
    else if (a[0] != '-' && !mnt) mnt = a;
    else usage();
  }
  if (!mnt || !g.url || !g.sources || !g.cache || !g.max_bytes || !threads) usage();
  size_t ul = strlen(g.url);
  while (ul > 0 && g.url[ul - 1] == '/') ul--;
  g.url = strndup(g.url, ul);
  if (strncmp(g.url, "http://", 7) && strncmp(g.url, "https://", 8)) usage();

  const char *auth = getenv("WARREN_BLOB_AUTH");
  if (auth && *auth) {
    char *h;
    if (strpbrk(auth, "\r\n") || asprintf(&h, "Authorization: %s", auth) < 0) usage();
    g.headers = curl_slist_append(NULL, h);
    free(h);
  }
  unsetenv("WARREN_BLOB_AUTH");
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || pthread_key_create(&curl_key, free_curl) != 0) return 1;

  if (mkdir(g.cache, 0700) < 0 && errno != EEXIST) {
    logf_("cannot make %s: %s", g.cache, strerror(errno));
    return 1;
  }
  g.cachefd = open(g.cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g.cachefd < 0) {
    logf_("cannot open %s: %s", g.cache, strerror(errno));
    return 1;
  }
  g.srcfd = open(g.sources, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g.srcfd < 0) {
    logf_("cannot open %s: %s", g.sources, strerror(errno));
    return 1;
  }
  load_cache();
  for (unsigned i = 0; i < (ahead_max < 4 ? ahead_max : 4); i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, prefetcher, NULL) != 0) return 1;
    pthread_detach(t);
  }

  char *fargv[] = {argv[0], "-o", "ro,allow_other,fsname=warren-blobfs,subtype=warren-blobfs", NULL};
  struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
  struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
  if (!se) return 1;
  if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, mnt) != 0) {
    logf_("cannot mount on %s", mnt);
    return 1;
  }
  struct fuse_loop_config *cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(cfg, threads);
  fuse_loop_cfg_set_idle_threads(cfg, 4);
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);

  // A clean exit: everything written reaches the disk, so the next start keeps the cache even
  // after a reboot.
  syncfs(g.cachefd);
  int fd = openat(g.cachefd, ".clean", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  logf_("exit: fetched %" PRIu64 " bytes in %" PRIu64 " requests, evicted %" PRIu64 " bytes", g.fetched, g.fetches, g.evicted);
  curl_global_cleanup();
  return rc < 0 ? 1 : 0;
}
