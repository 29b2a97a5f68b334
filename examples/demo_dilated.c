/*
 * demo_dilated.c - the README's first command: dilated attention on the standard configuration of
 * dilated-attention-pytorch's reports (B=1, H=8, D=64, segments 2048,4096,8192, dilations 1,2,4,
 * mod head mode), on the best backend this build has.
 *
 * It grows N (doubling from 512) while a forward stays within a few seconds, then checks sampled
 * rows of the last run against the f64 reference (dilattn_reference_rows) with SPEC 8's f32
 * tolerances, and prints time, memory and the backend that ran. Exit status 0 only if every
 * sampled value is within tolerance.
 *
 * Run: build/examples/dilattn_demo [max_seconds]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "dilattn.h"

#define CHECK(call)                                                                       \
  do {                                                                                    \
    dilattn_status s_ = (call);                                                           \
    if (s_ != DILATTN_SUCCESS) {                                                          \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, dilattn_status_string(s_),          \
              dilattn_last_error());                                                      \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double peak_rss_mib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

/* Deterministic inputs in [-1, 1): a 64-bit LCG, so every run checks the same numbers. */
static void fill_uniform(float* x, size_t n, uint64_t seed) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
  }
}

enum { B = 1, H = 8, D = 64, BRANCHES = 3, SAMPLES = 12 };

typedef struct {
  float *q, *k, *v, *o, *lse;
} Buffers;

/* One forward at sequence length n; returns seconds. */
static double run_forward(dilattn_desc desc, dilattn_backend requested, int64_t n, Buffers* buf,
                          dilattn_plan* plan_out) {
  const size_t elems = (size_t)B * (size_t)n * H * D;
  buf->q = malloc(elems * sizeof(float));
  buf->k = malloc(elems * sizeof(float));
  buf->v = malloc(elems * sizeof(float));
  buf->o = malloc(elems * sizeof(float));
  buf->lse = malloc((size_t)B * H * (size_t)n * sizeof(float));
  if (!buf->q || !buf->k || !buf->v || !buf->o || !buf->lse) {
    fprintf(stderr, "out of memory at N=%lld\n", (long long)n);
    exit(1);
  }
  fill_uniform(buf->q, elems, 1);
  fill_uniform(buf->k, elems, 2);
  fill_uniform(buf->v, elems, 3);

  dilattn_plan plan;
  const dilattn_shape shape = dilattn_shape_make(B, n, n, H, H, D);
  CHECK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, requested));
  dilattn_tensor q = dilattn_tensor_contiguous(buf->q, DILATTN_F32, B, n, H, D);
  dilattn_tensor k = dilattn_tensor_contiguous(buf->k, DILATTN_F32, B, n, H, D);
  dilattn_tensor v = dilattn_tensor_contiguous(buf->v, DILATTN_F32, B, n, H, D);
  dilattn_tensor o = dilattn_tensor_contiguous(buf->o, DILATTN_F32, B, n, H, D);
  dilattn_tensor lse = dilattn_tensor_contiguous(buf->lse, DILATTN_F32, B, H, n, 1);
  const double t0 = now_seconds();
  CHECK(dilattn_forward(plan, &q, &k, &v, &o, &lse, NULL, 0));
  const double seconds = now_seconds() - t0;
  *plan_out = plan;
  return seconds;
}

static void free_buffers(Buffers* buf) {
  free(buf->q); free(buf->k); free(buf->v); free(buf->o); free(buf->lse);
}

/* Rows to check: both ends, segment boundaries of every branch, and a spread in between. */
static int64_t sample_rows(int64_t n, int64_t* rows) {
  const int64_t picks[SAMPLES] = {0, 1, 2, 3, 2047, 2048, 4095, 4096, 8191, 8192, n / 3, n - 1};
  int64_t count = 0;
  for (int s = 0; s < SAMPLES; ++s)
    if (picks[s] < n) rows[count++] = picks[s];
  return count;
}

int main(int argc, char** argv) {
  const double budget = argc > 1 ? atof(argv[1]) : 3.0;
  const int64_t segments[BRANCHES] = {2048, 4096, 8192};
  const int64_t dilations[BRANCHES] = {1, 2, 4};

  dilattn_desc desc;
  CHECK(dilattn_desc_create(&desc));
  CHECK(dilattn_desc_set_dilated(desc, BRANCHES, segments, dilations, DILATTN_HEADS_MOD));

  printf("dilattn %d.%d.%d demo: dilated attention, B=%d H=%d D=%d, segments 2048,4096,8192, "
         "dilations 1,2,4 (mod heads), f32\n",
         DILATTN_VERSION_MAJOR, DILATTN_VERSION_MINOR, DILATTN_VERSION_PATCH, B, H, D);

  /* Grow N (from 512) while the next doubling is expected to stay within the budget. */
  int64_t n = 512;
  Buffers buf;
  dilattn_plan plan;
  double seconds = run_forward(desc, DILATTN_BACKEND_AUTO, n, &buf, &plan);
  dilattn_backend backend;
  CHECK(dilattn_plan_backend(plan, &backend));
  if (backend == DILATTN_BACKEND_CPU)  /* the instruction set it chose for this CPU */
    printf("backend: %s (auto), ISA %s\n", dilattn_backend_name(backend), dilattn_cpu_isa());
  else
    printf("backend: %s (auto)\n", dilattn_backend_name(backend));
  printf("  N=%8lld  forward %.3f s\n", (long long)n, seconds);
  while (seconds * 2.2 < budget && n < (1 << 20)) {
    CHECK(dilattn_plan_destroy(plan));
    free_buffers(&buf);
    n *= 2;
    seconds = run_forward(desc, DILATTN_BACKEND_AUTO, n, &buf, &plan);
    printf("  N=%8lld  forward %.3f s\n", (long long)n, seconds);
  }

  /* Useful work: 4*D FLOPs per (query, key) pair each branch visits (the bench's measure). */
  double pairs = 0;
  for (int b = 0; b < BRANCHES; ++b) {
    const double w = segments[b] < n ? (double)segments[b] : (double)n;
    pairs += (double)n / dilations[b] * (w / dilations[b]); /* rows selected x keys per row */
  }
  const double gflops = 4.0 * D * pairs * H * B / seconds * 1e-9;
  const double tensor_mib = 4.0 * (double)B * (double)n * H * D * 4 / (1 << 20);
  printf("result: N=%lld in %.3f s (%.1f useful GFLOP/s), tensors %.0f MiB, peak RSS %.0f MiB\n",
         (long long)n, seconds, gflops, tensor_mib, peak_rss_mib());

  /* Check sampled rows against the f64 reference. */
  int64_t rows[SAMPLES];
  const int64_t num_rows = sample_rows(n, rows);
  double* ref_o = malloc((size_t)num_rows * H * D * sizeof(double));
  double* ref_lse = malloc((size_t)num_rows * H * sizeof(double));
  dilattn_tensor q = dilattn_tensor_contiguous(buf.q, DILATTN_F32, B, n, H, D);
  dilattn_tensor k = dilattn_tensor_contiguous(buf.k, DILATTN_F32, B, n, H, D);
  dilattn_tensor v = dilattn_tensor_contiguous(buf.v, DILATTN_F32, B, n, H, D);
  CHECK(dilattn_reference_rows(plan, &q, &k, &v, rows, num_rows, ref_o, ref_lse));
  /* SPEC 8, f32: |x - ref| <= 1e-5 + 1e-4 |ref|; LSE absolute 1e-4. */
  int bad = 0;
  double max_err = 0, max_lse_err = 0;
  for (int64_t r = 0; r < num_rows; ++r)
    for (int h = 0; h < H; ++h) {
      const double lse_err = fabs(buf.lse[(size_t)h * (size_t)n + (size_t)rows[r]] - ref_lse[h * num_rows + r]);
      if (lse_err > max_lse_err) max_lse_err = lse_err;
      if (!(lse_err <= 1e-4)) ++bad;
      for (int d = 0; d < D; ++d) {
        const double x = buf.o[((size_t)rows[r] * H + (size_t)h) * D + (size_t)d];
        const double ref = ref_o[((size_t)r * H + (size_t)h) * D + (size_t)d];
        const double err = fabs(x - ref);
        if (err > max_err) max_err = err;
        if (!(err <= 1e-5 + 1e-4 * fabs(ref))) ++bad;
      }
    }
  printf("check: %lld sampled rows x %d heads against the f64 reference: max |O err| %.2e, "
         "max |LSE err| %.2e -> %s\n",
         (long long)num_rows, H, max_err, max_lse_err, bad ? "FAIL" : "PASS");

  free(ref_o);
  free(ref_lse);
  free_buffers(&buf);
  CHECK(dilattn_plan_destroy(plan));
  CHECK(dilattn_desc_destroy(desc));
  return bad ? 1 : 0;
}
