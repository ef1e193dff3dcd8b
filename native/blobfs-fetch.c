// warren-blobfs: fetching from the blob store: HEAD for a size, HTTP range requests into the cache,
// each block checked against its digest as it arrives.
#include "blobfs.h"

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

pthread_key_t curl_key;

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

void free_curl(void *c) { curl_easy_cleanup(c); }

/* Size of a file in the store: 0 and *size set, -ENOENT, or -EIO. */
int head_size(const char *url, uint64_t *size) {
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
int fetch_range(struct blob *b, uint64_t start, uint64_t want) {
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
