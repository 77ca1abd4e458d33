// gai: getaddrinfo(3) timed, once or in a loop, through the resolv.conf of
// the network namespace or pod it runs in. One program for every glibc
// and musl lookup the tests and benchmarks make; built with gcc (glibc's
// stub resolver) and, statically, with musl-gcc (musl's). The first
// argument names the mode, or the name the program is called by does
// (the client image installs it as glibc-loop and musl-resolve):
//
//   gai loop THREADS SECONDS NAMEFILE
//       lookups per second, for scripts/bench.sh's pod workload
//       (internal/tools/benchdrive): THREADS threads look up the names of
//       NAMEFILE (the first word of each line) in turn, each from its own
//       offset, with AI_ADDRCONFIG (what a dual-stack client asks: A and
//       AAAA), for SECONDS; prints
//         lookups N ok N failed N seconds S lookups_per_s X p50_us P p99_us Q
//       Bounded: 64 threads, 100000 names, an hour.
//   gai steady THREADS SECONDS PAUSE_MS NAME...      (as glibc-loop: the same)
//       a steady load, for the end-to-end test's availability steps:
//       THREADS threads look up the NAMEs in turn, PAUSE_MS between two,
//       for SECONDS; prints one JSON line
//         {"lookups":N,"ok":N,"failed":N,"fail_pct":P,"longest_gap_ms":G,
//          "gap_at_s":T,"p50_ms":..,"p99_ms":..,"max_ms":..}
//       longest_gap_ms is the longest time without a successful lookup
//       ending (from the start to the first, between two, from the last to
//       the end). Bounded: 16 threads, 64 names, an hour, 1,000,000
//       lookups kept.
//   gai once NAME                                    (as gaitime: the same)
//       one lookup, timed, for scripts/resolver-failover.sh; prints
//         ok MS ADDR[,ADDR...]   or   fail MS EAI_NAME
//       and exits 0 whatever the outcome.
//   gai resolve NAME...                              (as musl-resolve: the same)
//       "NAME ADDRESS" for every address of each NAME; exits 2 if a name
//       does not resolve (the e2e's musl client).
//
// Every lookup but loop's asks AF_UNSPEC and SOCK_STREAM with no flags (A
// and AAAA, as most programs ask). A failed lookup is counted, never
// retried.
//
// Build: cc -O2 -pthread -o gai scripts/gai.c
//        musl-gcc -static -O2 -pthread -o gai-musl scripts/gai.c
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#define MAX_THREADS 64
#define MAX_NAMES 100000
#define STEADY_THREADS 16
#define STEADY_NAMES 64
#define MAX_KEPT 1000000
// loop's latency histogram: 10 µs buckets up to 1 s, then one overflow
// bucket.
#define BUCKET_US 10
#define BUCKETS 100001

static const char *names[MAX_NAMES];
static int nnames;
static double t0, deadline;
static struct addrinfo hints;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// one looks name up with the mode's hints; 0 when it resolved.
static int one(const char *name, double *took) {
  struct addrinfo *res = NULL;
  double start = now();
  int rc = getaddrinfo(name, NULL, &hints, &res);
  *took = now() - start;
  if (res) freeaddrinfo(res);
  return rc;
}

// --- loop -------------------------------------------------------------------

struct worker {
  pthread_t t;
  long offset;
  uint64_t ok, failed;
  uint64_t *hist;
};

static void *loop_worker(void *arg) {
  struct worker *w = arg;
  for (long i = w->offset; now() < deadline; i++) {
    double took;
    if (one(names[i % nnames], &took) == 0)
      w->ok++;
    else
      w->failed++;
    long b = (long)(took * 1e6 / BUCKET_US);
    if (b >= BUCKETS) b = BUCKETS - 1;
    w->hist[b]++;
  }
  return NULL;
}

static long percentile(const uint64_t *hist, uint64_t total, double p) {
  uint64_t want = (uint64_t)(total * p), seen = 0;
  for (long b = 0; b < BUCKETS; b++) {
    seen += hist[b];
    if (seen > want) return b * BUCKET_US;
  }
  return (BUCKETS - 1) * BUCKET_US;
}

static int loop(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: gai loop THREADS SECONDS NAMEFILE\n");
    return 2;
  }
  int threads = atoi(argv[0]);
  double secs = atof(argv[1]);
  if (threads < 1 || threads > MAX_THREADS || secs <= 0 || secs > 3600) {
    fprintf(stderr, "gai loop: THREADS 1-%d, SECONDS (0, 3600]\n", MAX_THREADS);
    return 2;
  }
  FILE *f = fopen(argv[2], "r");
  if (!f) {
    fprintf(stderr, "gai loop: %s: %s\n", argv[2], strerror(errno));
    return 1;
  }
  char line[512];
  while (nnames < MAX_NAMES && fgets(line, sizeof line, f)) {
    line[strcspn(line, " \t\r\n")] = 0;
    if (line[0] && !(names[nnames] = strdup(line))) {
      fprintf(stderr, "gai loop: out of memory reading %s\n", argv[2]);
      return 1;
    }
    if (line[0]) nnames++;
  }
  fclose(f);
  if (nnames == 0) {
    fprintf(stderr, "gai loop: no names in %s\n", argv[2]);
    return 1;
  }
  hints.ai_flags = AI_ADDRCONFIG;
  struct worker w[MAX_THREADS];
  t0 = now();
  deadline = t0 + secs;
  for (int i = 0; i < threads; i++) {
    w[i].offset = (long)i * (nnames / threads + 1);
    w[i].ok = w[i].failed = 0;
    w[i].hist = calloc(BUCKETS, sizeof(uint64_t));
    if (!w[i].hist || pthread_create(&w[i].t, NULL, loop_worker, &w[i]) != 0) {
      fprintf(stderr, "gai loop: starting thread %d failed\n", i);
      return 1;
    }
  }
  uint64_t ok = 0, failed = 0;
  uint64_t *hist = calloc(BUCKETS, sizeof(uint64_t));
  if (!hist) {
    fprintf(stderr, "gai loop: out of memory\n");
    return 1;
  }
  for (int i = 0; i < threads; i++) {
    pthread_join(w[i].t, NULL);
    ok += w[i].ok;
    failed += w[i].failed;
    for (long b = 0; b < BUCKETS; b++) hist[b] += w[i].hist[b];
  }
  double took = now() - t0;
  uint64_t total = ok + failed;
  printf("lookups %llu ok %llu failed %llu seconds %.2f lookups_per_s %.0f p50_us %ld p99_us %ld\n",
         (unsigned long long)total, (unsigned long long)ok, (unsigned long long)failed, took, total / took,
         percentile(hist, total, 0.50), percentile(hist, total, 0.99));
  return 0;
}

// --- steady -----------------------------------------------------------------

struct rec {
  double end, took;
  int ok;
};
static struct rec *recs;
static long nrecs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct timespec pause_ts;

static void *steady_worker(void *arg) {
  long i = (long)arg;
  while (now() < deadline) {
    double took;
    int rc = one(names[i++ % nnames], &took);
    double end = now();
    pthread_mutex_lock(&mu);
    if (nrecs < MAX_KEPT) {
      recs[nrecs].end = end - t0;
      recs[nrecs].took = took;
      recs[nrecs].ok = rc == 0;
      nrecs++;
    }
    pthread_mutex_unlock(&mu);
    if (pause_ts.tv_sec || pause_ts.tv_nsec) nanosleep(&pause_ts, NULL);
  }
  return NULL;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int steady(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: glibc-loop THREADS SECONDS PAUSE_MS NAME...\n");
    return 2;
  }
  int threads = atoi(argv[0]);
  double seconds = atof(argv[1]);
  int pause_ms = atoi(argv[2]);
  if (threads < 1 || threads > STEADY_THREADS || seconds <= 0 || seconds > 3600 || pause_ms < 0 || pause_ms > 10000) {
    fprintf(stderr, "glibc-loop: THREADS 1 to %d, SECONDS up to 3600, PAUSE_MS 0 to 10000\n", STEADY_THREADS);
    return 2;
  }
  pause_ts.tv_sec = pause_ms / 1000;
  pause_ts.tv_nsec = (long)(pause_ms % 1000) * 1000000L;
  for (int i = 3; i < argc && nnames < STEADY_NAMES; i++) names[nnames++] = argv[i];
  recs = calloc(MAX_KEPT, sizeof *recs);
  double *ends = calloc(MAX_KEPT, sizeof *ends), *took = calloc(MAX_KEPT, sizeof *took);
  if (!recs || !ends || !took) {
    fprintf(stderr, "glibc-loop: out of memory\n");
    return 1;
  }
  t0 = now();
  deadline = t0 + seconds;
  pthread_t t[STEADY_THREADS];
  for (long i = 0; i < threads; i++) {
    if (pthread_create(&t[i], NULL, steady_worker, (void *)(i * 7)) != 0) {
      fprintf(stderr, "glibc-loop: starting thread %ld failed\n", i);
      return 1;
    }
  }
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  double total = now() - t0;
  long ok = 0, nends = 0;
  for (long i = 0; i < nrecs; i++) {
    took[i] = recs[i].took;
    if (recs[i].ok) {
      ok++;
      ends[nends++] = recs[i].end;
    }
  }
  qsort(ends, nends, sizeof *ends, cmpd);
  qsort(took, nrecs, sizeof *took, cmpd);
  double gap = 0, gapat = 0, prev = 0;
  for (long i = 0; i <= nends; i++) {
    double e = i < nends ? ends[i] : total;
    if (e - prev > gap) {
      gap = e - prev;
      gapat = prev;
    }
    prev = e;
  }
  double p50 = nrecs ? took[nrecs / 2] : 0, p99 = nrecs ? took[nrecs * 99 / 100] : 0, mx = nrecs ? took[nrecs - 1] : 0;
  printf("{\"lookups\":%ld,\"ok\":%ld,\"failed\":%ld,\"fail_pct\":%.3f,\"longest_gap_ms\":%.1f,\"gap_at_s\":%.3f,"
         "\"p50_ms\":%.2f,\"p99_ms\":%.2f,\"max_ms\":%.1f}\n",
         nrecs, ok, nrecs - ok, nrecs ? 100.0 * (nrecs - ok) / nrecs : 0, gap * 1000, gapat, p50 * 1000, p99 * 1000, mx * 1000);
  return 0;
}

// --- once and resolve ---------------------------------------------------------

static const char *eai_name(int err) {
  switch (err) {
  case EAI_AGAIN: return "EAI_AGAIN";
  case EAI_FAIL: return "EAI_FAIL";
  case EAI_NONAME: return "EAI_NONAME";
#ifdef EAI_NODATA
  case EAI_NODATA: return "EAI_NODATA";
#endif
  case EAI_MEMORY: return "EAI_MEMORY";
  case EAI_SYSTEM: return "EAI_SYSTEM";
  case EAI_FAMILY: return "EAI_FAMILY";
  case EAI_SERVICE: return "EAI_SERVICE";
  default: return "EAI_OTHER";
  }
}

// addrs prints res's addresses: a "NAME ADDRESS" line each when name is
// set, else comma-separated on the current line.
static void addrs(struct addrinfo *res, const char *name) {
  const char *sep = "";
  for (struct addrinfo *p = res; p != NULL; p = p->ai_next) {
    char buf[INET6_ADDRSTRLEN];
    const void *a = p->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)p->ai_addr)->sin_addr
                                            : (const void *)&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr;
    if (inet_ntop(p->ai_family, a, buf, sizeof buf) == NULL) continue;
    if (name)
      printf("%s %s\n", name, buf);
    else
      printf("%s%s", sep, buf);
    sep = ",";
  }
}

static int once(int argc, char **argv) {
  if (argc != 1) {
    fprintf(stderr, "usage: gaitime NAME\n");
    return 64;
  }
  struct addrinfo *res = NULL;
  double start = now();
  int err = getaddrinfo(argv[0], NULL, &hints, &res);
  double ms = (now() - start) * 1e3;
  if (err != 0) {
    printf("fail %.1f %s\n", ms, eai_name(err));
    return 0;
  }
  printf("ok %.1f ", ms);
  addrs(res, NULL);
  printf("\n");
  freeaddrinfo(res);
  return 0;
}

static int resolve(int argc, char **argv) {
  int rc = 0;
  if (argc < 1) {
    fprintf(stderr, "usage: musl-resolve NAME...\n");
    return 64;
  }
  for (int i = 0; i < argc; i++) {
    struct addrinfo *res = NULL;
    int err = getaddrinfo(argv[i], NULL, &hints, &res);
    if (err != 0) {
      fprintf(stderr, "%s: %s\n", argv[i], gai_strerror(err));
      rc = 2;
      continue;
    }
    addrs(res, argv[i]);
    freeaddrinfo(res);
  }
  return rc;
}

// --- main ---------------------------------------------------------------------

int main(int argc, char **argv) {
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const char *base = strrchr(argv[0], '/');
  base = base ? base + 1 : argv[0];
  // Called by the name of a mode: its arguments follow.
  if (strcmp(base, "glibc-loop") == 0) return steady(argc - 1, argv + 1);
  if (strcmp(base, "gaitime") == 0) return once(argc - 1, argv + 1);
  if (strcmp(base, "musl-resolve") == 0) return resolve(argc - 1, argv + 1);
  if (argc >= 2) {
    if (strcmp(argv[1], "loop") == 0) return loop(argc - 2, argv + 2);
    if (strcmp(argv[1], "steady") == 0) return steady(argc - 2, argv + 2);
    if (strcmp(argv[1], "once") == 0) return once(argc - 2, argv + 2);
    if (strcmp(argv[1], "resolve") == 0) return resolve(argc - 2, argv + 2);
  }
  fprintf(stderr, "usage: gai loop THREADS SECONDS NAMEFILE | steady THREADS SECONDS PAUSE_MS NAME... | once NAME | resolve NAME...\n");
  return 2;
}
