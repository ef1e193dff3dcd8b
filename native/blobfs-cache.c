// warren-blobfs: blobs and the cache: their cache files and block maps, the cache of an earlier
// run, trimming, fetching blocks once, and read-ahead.
#include "blobfs.h"

struct blob *find_blob(const char *hex) {
  for (size_t i = 0; i < g.nblobs; i++)
    if (strcmp(g.blobs[i]->hex, hex) == 0) return g.blobs[i];
  return NULL;
}

struct blob *blob_at(fuse_ino_t ino) { return ino >= 2 && ino - 2 < g.nblobs ? g.blobs[ino - 2] : NULL; }

/* The block digests of a blob, from `<sources>/<hex>.blocks`; NULL (logged) when absent or wrong. */
static uint8_t *load_hashes(const char *hex, uint32_t nblocks) {
  char name[80];
  snprintf(name, sizeof name, "%s.blocks", hex);
  int fd = openat(g.srcfd, name, O_RDONLY | O_CLOEXEC);
  struct stat st;
  size_t want = (size_t)nblocks * 32;
  uint8_t *h = malloc(want ? want : 1);
  if (fd < 0 || !h || fstat(fd, &st) < 0 || (size_t)st.st_size != want || pread(fd, h, want, 0) != (ssize_t)want) {
    logf_("no usable block digests for %s (%s)", hex, fd < 0 ? strerror(errno) : "wrong size");
    if (fd >= 0) close(fd);
    free(h);
    return NULL;
  }
  close(fd);
  return h;
}

static int write_map_header(int fd, uint64_t size) {
  unsigned char h[MAP_HEADER] = {0};
  memcpy(h, MAP_MAGIC, 8);
  memcpy(h + 8, &size, 8);
  uint32_t block = BLOCK;
  memcpy(h + 16, &block, 4);
  return pwrite(fd, h, sizeof h, 0) == (ssize_t)sizeof h ? 0 : -1;
}

/* Opens (creating if need be) the cache files of a blob of known size; NULL on failure. With
 * `load`, blocks marked present in an existing map count as cached. */
struct blob *open_blob(const char *hex, uint64_t size, const char *url, int load) {
  char name[80];
  struct blob *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  memcpy(b->hex, hex, 65);
  b->size = size;
  b->nblocks = (uint32_t)((size + BLOCK - 1) / BLOCK);
  b->next = UINT32_MAX;
  b->url = strdup(url);
  b->hashes = load_hashes(hex, b->nblocks);
  if (!b->hashes) {
    free(b->url);
    free(b);
    return NULL;
  }
  b->state = calloc(b->nblocks ? b->nblocks : 1, 1);
  b->used = calloc(b->nblocks ? b->nblocks : 1, sizeof *b->used);
  snprintf(name, sizeof name, "%s.data", hex);
  b->fd = openat(g.cachefd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  snprintf(name, sizeof name, "%s.map", hex);
  b->mapfd = openat(g.cachefd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (!b->url || !b->state || !b->used || b->fd < 0 || b->mapfd < 0) goto fail;
  if (ftruncate(b->fd, (off_t)size) < 0) goto fail;
  unsigned char h[MAP_HEADER];
  int fresh = 1;
  if (load && pread(b->mapfd, h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(h, MAP_MAGIC, 8) == 0) {
    uint64_t sz;
    uint32_t blk;
    memcpy(&sz, h + 8, 8);
    memcpy(&blk, h + 16, 4);
    if (sz == size && blk == BLOCK && pread(b->mapfd, b->state, b->nblocks, MAP_HEADER) == (ssize_t)b->nblocks) {
      fresh = 0;
      for (uint32_t i = 0; i < b->nblocks; i++) {
        if (b->state[i] != PRESENT) b->state[i] = ABSENT;
        else g.cached += block_bytes(b, i);
      }
    }
  }
  if (fresh) {
    memset(b->state, ABSENT, b->nblocks);
    if (ftruncate(b->mapfd, 0) < 0 || write_map_header(b->mapfd, size) < 0 || ftruncate(b->mapfd, MAP_HEADER + b->nblocks) < 0 ||
        fallocate(b->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)size) < 0)
      goto fail;
  }
  if (g.nblobs == g.cap) {
    size_t cap = g.cap ? g.cap * 2 : 64;
    struct blob **n = realloc(g.blobs, cap * sizeof *n);
    if (!n) goto fail;
    g.blobs = n;
    g.cap = cap;
  }
  b->ino = (fuse_ino_t)(g.nblobs + 2);
  g.blobs[g.nblobs++] = b;
  return b;
fail:
  logf_("cannot open the cache files of %s: %s", hex, strerror(errno));
  if (b->fd >= 0) close(b->fd);
  if (b->mapfd >= 0) close(b->mapfd);
  free(b->url);
  free(b->hashes);
  free(b->state);
  free(b->used);
  free(b);
  return NULL;
}

/* The store's URL for a blob: the source file's, or the store's own naming. */
int source_of(const char *hex, char *url, size_t urlsz, uint64_t *size) {
  char name[80], buf[4096];
  snprintf(name, sizeof name, "%s.src", hex);
  int fd = openat(g.srcfd, name, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
      buf[n] = 0;
      char *u = NULL;
      unsigned long long sz = strtoull(buf, &u, 10);
      while (u && *u == ' ') u++;
      size_t l = u ? strcspn(u, "\n") : 0;
      if (u && l > 0 && l < urlsz) {
        memcpy(url, u, l);
        url[l] = 0;
        *size = sz;
        return 1;
      }
    }
    logf_("ignoring a malformed %s", name);
  }
  snprintf(url, urlsz, "%s/%s.data", g.url, hex);
  return 0;
}

/* Loads the blobs cached by an earlier run; discards them when they cannot be trusted. */
void load_cache(void) {
  char boot[64] = "", last[64] = "";
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, boot, sizeof boot - 1);
    boot[n > 0 ? n : 0] = 0;
    close(fd);
  }
  fd = openat(g.cachefd, ".boot", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, last, sizeof last - 1);
    last[n > 0 ? n : 0] = 0;
    close(fd);
  }
  int trusted = faccessat(g.cachefd, ".clean", F_OK, 0) == 0 || (boot[0] && strcmp(boot, last) == 0);
  unlinkat(g.cachefd, ".clean", 0);
  fd = openat(g.cachefd, ".boot", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (write(fd, boot, strlen(boot)) < 0) logf_("cannot write .boot: %s", strerror(errno));
    close(fd);
  }
  DIR *d = fdopendir(dup(g.cachefd));
  if (!d) return;
  struct dirent *e;
  size_t kept = 0, dropped = 0;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n != 68 || strcmp(e->d_name + 64, ".map") != 0 || !valid_hex(e->d_name, 64)) continue;
    char hex[65], url[4096], name[80];
    memcpy(hex, e->d_name, 64);
    hex[64] = 0;
    unsigned char h[MAP_HEADER];
    uint64_t size = 0;
    int mfd = openat(g.cachefd, e->d_name, O_RDONLY | O_CLOEXEC);
    int ok = mfd >= 0 && pread(mfd, h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(h, MAP_MAGIC, 8) == 0;
    if (mfd >= 0) close(mfd);
    if (ok) memcpy(&size, h + 8, 8);
    uint64_t srcsize = size;
    source_of(hex, url, sizeof url, &srcsize);
    if (ok && trusted && srcsize == size && open_blob(hex, size, url, 1)) {
      kept++;
      continue;
    }
    unlinkat(g.cachefd, e->d_name, 0);
    snprintf(name, sizeof name, "%s.data", hex);
    unlinkat(g.cachefd, name, 0);
    dropped++;
  }
  closedir(d);
  logf_("cache %s: %zu files (%" PRIu64 " bytes) kept, %zu dropped%s", g.cache, kept, g.cached, dropped,
        dropped && !trusted ? " (the last exit was not clean and the host has restarted since)" : "");
}

struct cand {
  uint64_t used;
  struct blob *b;
  uint32_t k;
};

static int by_use(const void *x, const void *y) {
  uint64_t a = ((const struct cand *)x)->used, b = ((const struct cand *)y)->used;
  return a < b ? -1 : a > b;
}

/* Punches out the least recently read blocks of files nobody has open until the cache is at 90 %
 * of its limit. Called with g.mu held. */
void trim_locked(void) {
  uint64_t target = g.max_bytes / 10 * 9;
  if (g.cached <= g.max_bytes) return;
  size_t n = 0;
  for (size_t i = 0; i < g.nblobs; i++)
    if (!g.blobs[i]->opens)
      for (uint32_t k = 0; k < g.blobs[i]->nblocks; k++) n += g.blobs[i]->state[k] == PRESENT;
  struct cand *c = malloc((n ? n : 1) * sizeof *c);
  if (!c) return;
  size_t m = 0;
  for (size_t i = 0; i < g.nblobs; i++) {
    struct blob *b = g.blobs[i];
    if (b->opens) continue;
    for (uint32_t k = 0; k < b->nblocks; k++)
      if (b->state[k] == PRESENT) c[m++] = (struct cand){b->used[k], b, k};
  }
  qsort(c, m, sizeof *c, by_use);
  for (size_t i = 0; i < m && g.cached > target; i++) {
    struct blob *b = c[i].b;
    uint64_t len = block_bytes(b, c[i].k);
    static const uint8_t zero = ABSENT;
    if (pwrite(b->mapfd, &zero, 1, MAP_HEADER + c[i].k) != 1) continue;
    b->state[c[i].k] = ABSENT;
    g.cached -= len;
    g.evicted += len;
    if (fallocate(b->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)c[i].k * BLOCK, (off_t)len) < 0)
      logf_("cannot punch out a block of %s: %s", b->hex, strerror(errno));
  }
  free(c);
}

/* Fetches blocks [i, j] of b, which the caller marked FETCHING, and marks them present (or
 * absent again); called without g.mu. */
static int fetch_blocks(struct blob *b, uint32_t i, uint32_t j) {
  uint64_t start = (uint64_t)i * BLOCK, end = (uint64_t)(j + 1) * BLOCK;
  if (end > b->size) end = b->size;
  int err = fetch_range(b, start, end - start);
  if (!err) {
    static const uint8_t ones[256] = {[0 ... 255] = PRESENT};
    for (uint32_t k = i; k <= j && !err; k += 256) {
      size_t cnt = j - k + 1 < 256 ? j - k + 1 : 256;
      if (pwrite(b->mapfd, ones, cnt, MAP_HEADER + k) != (ssize_t)cnt) err = -EIO;
    }
  }
  pthread_mutex_lock(&g.mu);
  memset(b->state + i, err ? ABSENT : PRESENT, j - i + 1);
  if (!err) g.cached += end - start;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  return err;
}

// Read-ahead: a file read block after block gets the blocks after it fetched in parallel, in
// requests of up to --readahead-run blocks; the window starts at 2, doubles with each new block
// read in sequence (up to --readahead blocks) and drops to nothing on a jump, so random reads
// fetch only what they touch.
struct job {
  struct blob *b;
  uint32_t i, j;
  struct job *next;
};
static struct job *jobs, **jobs_end = &jobs;
static pthread_cond_t jobs_cv = PTHREAD_COND_INITIALIZER;
uint32_t ahead_max = 8, ahead_run = 4;

void *prefetcher(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g.mu);
  for (;;) {
    while (!jobs) pthread_cond_wait(&jobs_cv, &g.mu);
    struct job *j = jobs;
    jobs = j->next;
    if (!jobs) jobs_end = &jobs;
    pthread_mutex_unlock(&g.mu);
    fetch_blocks(j->b, j->i, j->j);
    free(j);
    pthread_mutex_lock(&g.mu);
    trim_locked();
  }
  return NULL;
}

/* Called with g.mu held, for a read of blocks [first, last]. */
static void read_ahead_locked(struct blob *b, uint32_t first, uint32_t last) {
  if (!ahead_max) return;
  if (first == b->next) b->window = b->window ? (b->window * 2 < ahead_max ? b->window * 2 : ahead_max) : 2;
  else if (first + 1 != b->next) b->window = 0;
  b->next = last + 1;
  // Nothing ahead into a cache near its limit: it would only push out blocks read before.
  if (g.cached >= g.max_bytes / 10 * 9) return;
  // Runs of absent blocks, in requests of up to ahead_run blocks, fetched side by side.
  uint64_t now = g.tick;
  uint32_t end = last + b->window < b->nblocks - 1 ? last + b->window : b->nblocks - 1;
  for (uint32_t k = last + 1; k <= end;) {
    if (b->state[k] != ABSENT) {
      k++;
      continue;
    }
    uint32_t j = k;
    while (j + 1 <= end && j + 1 - k < ahead_run && b->state[j + 1] == ABSENT) j++;
    struct job *job = malloc(sizeof *job);
    if (!job) return;
    *job = (struct job){b, k, j, NULL};
    for (uint32_t x = k; x <= j; x++) {
      b->state[x] = FETCHING;
      b->used[x] = now;
    }
    *jobs_end = job;
    jobs_end = &job->next;
    pthread_cond_signal(&jobs_cv);
    k = j + 1;
  }
}

/* Makes blocks [first, last] of b present, fetching the missing ones: 0 or -errno. */
int ensure(struct blob *b, uint32_t first, uint32_t last) {
  pthread_mutex_lock(&g.mu);
  uint64_t now = ++g.tick;
  for (uint32_t i = first; i <= last; i++) b->used[i] = now;
  read_ahead_locked(b, first, last);
  for (;;) {
    uint32_t i = first;
    while (i <= last && b->state[i] != ABSENT) i++;
    if (i <= last) {
      uint32_t j = i;
      while (j + 1 <= last && b->state[j + 1] == ABSENT) j++;
      memset(b->state + i, FETCHING, j - i + 1);
      pthread_mutex_unlock(&g.mu);
      int err = fetch_blocks(b, i, j);
      pthread_mutex_lock(&g.mu);
      if (err) {
        pthread_mutex_unlock(&g.mu);
        return err;
      }
      continue;
    }
    int waiting = 0;
    for (i = first; i <= last; i++) waiting |= b->state[i] == FETCHING;
    if (!waiting) break;
    pthread_cond_wait(&g.cv, &g.mu);
  }
  trim_locked();
  pthread_mutex_unlock(&g.mu);
  return 0;
}
