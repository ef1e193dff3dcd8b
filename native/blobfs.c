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
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <openssl/evp.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1u << 20) // the unit of fetching, caching and checking
#define MAP_MAGIC "WBFSMAP1"
#define MAP_HEADER 24
#define NAME_LEN 69 // 64 hex + ".data"

enum { ABSENT = 0, PRESENT = 1, FETCHING = 2 };

struct blob {
  char hex[65];
  fuse_ino_t ino; // blobs[ino - 2]
  uint64_t size;
  uint32_t nblocks;
  char *url;
  int fd, mapfd;
  uint8_t *state; // per block: ABSENT, PRESENT, FETCHING
  uint64_t *used; // per block: tick of the last read
  uint8_t *hashes; // per block: its sha256
  int opens;
  uint32_t next, window; // read-ahead: the block after the last read, and how far ahead to fetch
};

static struct {
  const char *url, *cache, *sources;
  uint64_t max_bytes;
  int cachefd, srcfd;
  struct curl_slist *headers;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct blob **blobs; // inode N (N >= 2) is blobs[N - 2]
  size_t nblobs, cap;
  uint64_t cached; // bytes of blocks present
  uint64_t tick;
  uint64_t fetched, fetches, evicted; // counters, logged at exit
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void logf_(const char *fmt, ...) {
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

static int valid_hex(const char *s, size_t n) {
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

static uint64_t block_bytes(const struct blob *b, uint32_t i) {
  uint64_t start = (uint64_t)i * BLOCK;
  return b->size - start < BLOCK ? b->size - start : BLOCK;
}

// ---------------------------------------------------------------------------------------------
// HTTP

/* After a request fails all its tries, the next ones get one try each until one succeeds: a read
 * from a sandbox fails fast while the store is away, and works again as soon as it is back. */
static int64_t store_down_until; // CLOCK_MONOTONIC ms

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int store_down(void) { return now_ms() < __atomic_load_n(&store_down_until, __ATOMIC_RELAXED); }

static void mark_store_down(int down) { __atomic_store_n(&store_down_until, down ? now_ms() + 60000 : 0, __ATOMIC_RELAXED); }

static pthread_key_t curl_key;

static CURL *thread_curl(void) {
  CURL *c = pthread_getspecific(curl_key);
  if (!c) {
    c = curl_easy_init();
    if (!c) return NULL;
    pthread_setspecific(curl_key, c);
  }
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 20L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  if (g.headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, g.headers);
  return c;
}

static void free_curl(void *c) { curl_easy_cleanup(c); }

/* Size of a file in the store: 0 and *size set, -ENOENT, or -EIO. */
static int head_size(const char *url, uint64_t *size) {
  int tries = store_down() ? 1 : 3;
  for (int attempt = 0; attempt < tries; attempt++) {
    CURL *c = thread_curl();
    if (!c) return -EIO;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_off_t len = -1;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
    if (rc == CURLE_OK) mark_store_down(0);
    if (rc == CURLE_OK && status == 404) return -ENOENT;
    if (rc == CURLE_OK && status == 200 && len >= 0) {
      *size = (uint64_t)len;
      return 0;
    }
    logf_("HEAD %s: %s, status %ld", url, rc == CURLE_OK ? "ok" : curl_easy_strerror(rc), status);
    if (rc == CURLE_OK && status < 500) return -EIO;
    if (attempt + 1 < tries) usleep(100000u << (2 * attempt));
  }
  mark_store_down(1);
  return -EIO;
}

struct sink {
  CURL *c;
  struct blob *b;
  uint64_t start, want, got;
  int bad;          // 1: not the range asked for; 2: the cache cannot be written; 3: a block does not match its digest
  uint8_t *buf;     // the block arriving (BLOCK bytes)
  uint32_t k;       // its index
  uint64_t inblock; // bytes of it received so far
};

/* Takes bytes arriving in order into the block buffer; each block, once whole, is checked against
 * its digest and then written to the cache in one call. 0, or -1 (s->bad set). */
static int take_bytes(struct sink *s, const char *p, size_t len) {
  while (len > 0) {
    uint64_t blen = block_bytes(s->b, s->k);
    size_t take = blen - s->inblock < len ? (size_t)(blen - s->inblock) : len;
    memcpy(s->buf + s->inblock, p, take);
    s->inblock += take;
    p += take;
    len -= take;
    if (s->inblock < blen) continue;
    unsigned char h[32];
    unsigned int hl = 0;
    if (!EVP_Digest(s->buf, blen, h, &hl, EVP_sha256(), NULL) || hl != 32 || memcmp(h, s->b->hashes + (size_t)s->k * 32, 32) != 0) {
      s->bad = 3;
      return -1;
    }
    for (uint64_t off = 0; off < blen;) {
      ssize_t w = pwrite(s->b->fd, s->buf + off, blen - off, (off_t)((uint64_t)s->k * BLOCK + off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        s->bad = 2;
        return -1;
      }
      off += (uint64_t)w;
    }
    s->k++;
    s->inblock = 0;
  }
  return 0;
}

static size_t on_header(char *p, size_t sz, size_t n, void *arg) {
  struct sink *s = arg;
  size_t len = sz * n;
  uint64_t a, b, t;
  if (len > 14 && strncasecmp(p, "content-range:", 14) == 0) {
    char line[128];
    size_t m = len - 14 < sizeof line - 1 ? len - 14 : sizeof line - 1;
    memcpy(line, p + 14, m);
    line[m] = 0;
    if (sscanf(line, " bytes %" SCNu64 "-%" SCNu64 "/%" SCNu64, &a, &b, &t) != 3 || a != s->start || b + 1 != s->start + s->want ||
        t != s->b->size)
      s->bad = 1;
  }
  return len;
}

static size_t on_body(char *p, size_t sz, size_t n, void *arg) {
  struct sink *s = arg;
  size_t len = sz * n;
  long status = 0;
  curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &status);
  // 206 with the range asked for, or 200 with the whole file when that is what was asked for.
  if (s->bad || !(status == 206 || (status == 200 && s->start == 0 && s->want == s->b->size)) || s->got + len > s->want) {
    if (!s->bad) s->bad = 1;
    return 0;
  }
  if (take_bytes(s, p, len) < 0) return 0;
  s->got += len;
  return len;
}

/* Fetches bytes [start, start+want) of b into its cache file: 0 or -EIO. */
static int fetch_range(struct blob *b, uint64_t start, uint64_t want) {
  char range[64];
  snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, start, start + want - 1);
  int tries = store_down() ? 1 : 3;
  for (int attempt = 0; attempt < tries; attempt++) {
    CURL *c = thread_curl();
    if (!c) return -EIO;
    static __thread uint8_t *buf;
    if (!buf && !(buf = malloc(BLOCK))) return -EIO;
    struct sink s = {.c = c, .b = b, .start = start, .want = want, .buf = buf, .k = (uint32_t)(start / BLOCK)};
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(c, CURLOPT_URL, b->url);
    curl_easy_setopt(c, CURLOPT_RANGE, range);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK && s.got == want && !s.bad) {
      mark_store_down(0);
      __atomic_add_fetch(&g.fetched, want, __ATOMIC_RELAXED);
      __atomic_add_fetch(&g.fetches, 1, __ATOMIC_RELAXED);
      return 0;
    }
    logf_("GET %s bytes %s: %s, status %ld, %" PRIu64 " of %" PRIu64 " bytes%s", b->url, range,
          rc == CURLE_OK ? "ok" : curl_easy_strerror(rc), status, s.got, want, s.bad == 1 ? ", wrong range" : s.bad == 2 ? ", cache write failed" : s.bad == 3 ? ", a block does not match its digest" : "");
    // An answer that is not the range asked for, or a refusal, is not tried again.
    if (s.bad || (rc == CURLE_OK && status >= 400 && status < 500)) return -EIO;
    if (attempt + 1 < tries) usleep(100000u << (2 * attempt));
  }
  mark_store_down(1);
  return -EIO;
}

// ---------------------------------------------------------------------------------------------
// Blobs and the cache

static struct blob *find_blob(const char *hex) {
  for (size_t i = 0; i < g.nblobs; i++)
    if (strcmp(g.blobs[i]->hex, hex) == 0) return g.blobs[i];
  return NULL;
}

static struct blob *blob_at(fuse_ino_t ino) { return ino >= 2 && ino - 2 < g.nblobs ? g.blobs[ino - 2] : NULL; }

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
static struct blob *open_blob(const char *hex, uint64_t size, const char *url, int load) {
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
static int source_of(const char *hex, char *url, size_t urlsz, uint64_t *size) {
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
static void load_cache(void) {
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
static void trim_locked(void) {
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
static uint32_t ahead_max = 8, ahead_run = 4;

static void *prefetcher(void *arg) {
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
static int ensure(struct blob *b, uint32_t first, uint32_t last) {
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

// ---------------------------------------------------------------------------------------------
// FUSE

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
