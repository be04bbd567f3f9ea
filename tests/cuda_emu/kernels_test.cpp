// cuda_emu.host_logic.kernels: the kernels of libtodre-cuda, through their
// launchers (select_kernels.h, relevance_kernels.h), on the CPU emulator, in
// the same translation the emulated module is built from (emulate_cu.py,
// object library todre_cuda_emu_objs), against float64 / float references:
// norms and the non-finite flags, CENTER and ISOLATED pivot scores and
// pivots, both greedy loops (the GRAM block loop and the cooperative GEMV
// loop at several grid sizes, MAX_SUM and MAX_MIN) against the pinned greedy
// rule, NaN similarities from finite rows (never taken first, never the
// ISOLATED pivot), the position order and -1 poisoning, CLS_TOPK keys, the
// radix sort and take, and the stage-2 sums from Q/K (GQA, chunked prefill,
// question-first layout) and from probabilities (vector loads on misaligned
// rows).
//
// Every input and output lives in emulated device memory (cudaMalloc), every
// launch goes through the stream queue, and the run is repeated with the
// threads of each block resumed in ascending and then descending order, so
// that a kernel reading shared data without the barrier that orders it gets
// different values in one of the two.
//
// What this proves: the kernels' arithmetic, indexing, reductions, barriers
// (as strict barriers) and launch configurations, on a CPU. What it does not:
// that they run on a GPU (memory model, real warp scheduling, speed);
// unit.cuda_parity on a GPU is the check for that.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "device_util.cuh"
#include "relevance_kernels.h"
#include "select_kernels.h"

static int failures = 0;
#define CHECK(c, ...)                                               \
  do {                                                              \
    if (!(c)) {                                                     \
      failures++;                                                   \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                   \
      printf(__VA_ARGS__);                                          \
      printf("\n");                                                 \
    }                                                               \
  } while (0)
#define CHECK_CUDA(call) CHECK((call) == cudaSuccess, "%s failed", #call)

// Emulated device memory holding a copy of a host vector (or n elements).
template <typename T> struct Dev {
  T *p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    if (cudaMalloc((void **)&p, (n ? n : 1) * sizeof(T)) != cudaSuccess) {
      printf("cudaMalloc failed\n");
      exit(1);
    }
  }
  explicit Dev(const std::vector<T> &h) : Dev(h.size()) { put(h); }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;
  ~Dev() { cudaFree(p); }
  void put(const std::vector<T> &h) {
    CHECK_CUDA(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Run the queued work; a kernel that failed (barrier deadlock) reports here.
static void run_queue(const char *what) {
  cudaError_t e = cudaDeviceSynchronize();
  CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorName(e));
}

static std::mt19937_64 rng(1);
static double nrm() {
  static std::normal_distribution<double> d;
  return d(rng);
}

// The pinned greedy rule on a raw Gram matrix (as the kernels compute it).
static void ref_greedy(int obj, const float *G, const float *inv, int n, int k, int p,
                       std::vector<int64_t> &sel) {
  std::vector<float> cost(n, obj == 0 ? 0.f : -INFINITY);
  int c = p;
  sel.clear();
  for (int t = 0;; t++) {
    sel.push_back(c);
    if (t == k - 1) break;
    float ic = inv[c];
    uint64_t best = ~0ull;
    for (int v = 0; v < n; v++) {
      float x = cost[v];
      if (v == c) {
        x = INFINITY;
      } else if (x != INFINITY) {
        float sim = G[(size_t)c * n + v] * ic * inv[v];
        float y = sim - 1.f;
        // A NaN similarity makes either cost NaN; a NaN or overflowing cost
        // becomes FLT_MAX (never taken before a row whose cost is a number).
        x = obj == 0 ? x + sim : (y > x || std::isnan(y)) ? y : x;
        if (!(x < INFINITY)) x = FLT_MAX;
      }
      cost[v] = x;
      float f = x + 0.0f;
      unsigned b;
      memcpy(&b, &f, 4);
      b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
      uint64_t key = ((uint64_t)b << 32) | (unsigned)v;
      best = std::min(best, key);
    }
    c = (int)(best & 0xffffffffu);
  }
}

template <typename T> static T conv(float f);
template <> float conv<float>(float f) { return f; }
template <> __half conv<__half>(float f) { return {todre_f32_to_f16(f)}; }
template <typename T> static todre_dtype dtype_of();
template <> todre_dtype dtype_of<float>() { return TODRE_DTYPE_F32; }
template <> todre_dtype dtype_of<__half>() { return TODRE_DTYPE_F16; }

template <typename T> static void test_select(int d, int ld, int vec, const char *name) {
  const std::vector<int> ns = {37, 1, 50, 9}, ks = {10, 1, 50, 3};
  const int nseg = (int)ns.size();
  std::vector<int64_t> rowoff(nseg + 1, 0);
  for (int b = 0; b < nseg; b++) rowoff[b + 1] = rowoff[b] + ns[b];
  const int64_t N = rowoff[nseg];
  std::vector<T> E((size_t)N * ld);
  std::vector<double> Ed((size_t)N * ld);
  for (int64_t r = 0; r < N; r++)
    for (int e = 0; e < ld; e++) {
      float x = e < d ? (float)(nrm() + (r % 3)) : NAN;  // padding is never read
      E[r * ld + e] = conv<T>(x);
      Ed[r * ld + e] = todre_cuda::to_f32(E[r * ld + e]);
    }
  // A zero row (row 5 of set 0).
  std::fill(E.begin() + 5 * ld, E.begin() + 5 * ld + d, conv<T>(0.f));
  std::fill(Ed.begin() + 5 * ld, Ed.begin() + 5 * ld + d, 0.0);
  Dev<T> E_d(E);
  Dev<int64_t> rowoff_d(rowoff);
  Dev<float> inv_d(N), score_d(N);
  Dev<int> flags_d(std::vector<int>(nseg + 1, 0)), sticky_d(std::vector<int>(1, 0));
  const todre_cuda_emb emb = {E_d.p, dtype_of<T>(), ld, d, vec};

  // Norms.
  CHECK_CUDA(todre_cuda_launch_rownorm(&emb, N, rowoff_d.p, nseg, inv_d.p, flags_d.p, sticky_d.p,
                                       nullptr));
  run_queue("rownorm");
  std::vector<float> inv = inv_d.get();
  for (int64_t r = 0; r < N; r++) {
    double ss = 0;
    for (int e = 0; e < d; e++) ss += Ed[r * ld + e] * Ed[r * ld + e];
    double want = ss > 0 ? 1 / sqrt(ss) : 0;
    CHECK(fabs(inv[r] - want) <= 1e-6 * want, "%s inv[%ld] %g vs %g", name, (long)r, inv[r], want);
  }
  CHECK(sticky_d.get()[0] == 0, "%s sticky flag set on finite input", name);

  // Segments (all on the GRAM strategy here) and their raw Gram matrices.
  std::vector<todre_cuda_seg> segs(nseg);
  int64_t out0 = 0, goff = 0;
  for (int b = 0; b < nseg; b++) {
    segs[b] = {rowoff[b], out0, goff, ns[b], ks[b], 0, ns[b], -1, 0};
    out0 += ks[b];
    goff += (int64_t)ns[b] * ns[b];
  }
  segs[0].lo = 3;
  segs[0].hi = 30;
  const int64_t K = out0;
  Dev<todre_cuda_seg> segs_d(segs);
  std::vector<float> gram(goff);
  for (int b = 0; b < nseg; b++)
    for (int u = 0; u < ns[b]; u++)
      for (int v = 0; v < ns[b]; v++) {
        double s = 0;
        for (int e = 0; e < d; e++) s += Ed[(rowoff[b] + u) * ld + e] * Ed[(rowoff[b] + v) * ld + e];
        gram[segs[b].gram_off + (int64_t)u * ns[b] + v] = (float)s;
      }
  Dev<float> gram_d(gram);

  // CENTER pivot: mean of the normalised rows of the range, argmax x . mu.
  const int chunks = 3;
  Dev<float> mu_d((size_t)nseg * d * (chunks + 1));
  Dev<int> pivot_d(std::vector<int>(nseg, -5));
  CHECK_CUDA(todre_cuda_launch_center(&emb, N, segs_d.p, rowoff_d.p, nseg, chunks, inv_d.p,
                                      mu_d.p + (size_t)nseg * d, mu_d.p, score_d.p, nullptr));
  CHECK_CUDA(todre_cuda_launch_pivot(segs_d.p, 0, nseg, -1, TODRE_CUDA_PIVOT_ARGMAX, score_d.p,
                                     pivot_d.p, nullptr));
  run_queue("CENTER pivot");
  std::vector<int> pivot = pivot_d.get();
  for (int b = 0; b < nseg; b++) {
    std::vector<double> m(d, 0);
    int lo = segs[b].lo, hi = segs[b].hi;
    for (int v = lo; v < hi; v++)
      for (int e = 0; e < d; e++) m[e] += Ed[(rowoff[b] + v) * ld + e] * inv[rowoff[b] + v] / (hi - lo);
    int best = lo;
    double bs = -1e300;
    for (int v = lo; v < hi; v++) {
      double s = 0;
      for (int e = 0; e < d; e++) s += Ed[(rowoff[b] + v) * ld + e] * m[e];
      s *= inv[rowoff[b] + v];
      if (s > bs + 1e-9) {
        bs = s;
        best = v;
      }
    }
    CHECK(pivot[b] == best, "%s CENTER pivot set %d: %d vs %d", name, b, pivot[b], best);
  }

  // ISOLATED scores from the Gram matrix (row panels of one set), then pivots.
  for (int b = 0; b < nseg; b++)
    CHECK_CUDA(todre_cuda_launch_rowmax(gram_d.p + segs[b].gram_off, ns[b], ns[b], 0, ns[b],
                                        inv_d.p + rowoff[b], score_d.p + rowoff[b], nullptr));
  Dev<int> iso_d(std::vector<int>(nseg, -5));
  CHECK_CUDA(todre_cuda_launch_pivot(segs_d.p, 0, nseg, 0, TODRE_CUDA_PIVOT_ARGMIN, score_d.p,
                                     iso_d.p, nullptr));
  run_queue("ISOLATED scores");
  std::vector<float> score = score_d.get();
  std::vector<int> iso = iso_d.get();
  for (int b = 0; b < nseg; b++) {
    int n = ns[b], want = segs[b].lo;
    for (int v = 0; v < n; v++) {
      float m = NAN;  // no other row: NaN, which never wins the pivot
      for (int u = 0; u < n; u++)
        if (u != v)
          m = fmaxf(m, gram[segs[b].gram_off + (int64_t)v * n + u] * inv[rowoff[b] + v] *
                           inv[rowoff[b] + u]);
      float got = score[rowoff[b] + v];
      CHECK(got == m || (std::isnan(got) && std::isnan(m)), "%s rowmax set %d v %d", name, b, v);
    }
    for (int v = segs[b].lo; v < segs[b].hi; v++)
      if (score[rowoff[b] + v] < score[rowoff[b] + want]) want = v;
    if (n > 1) CHECK(iso[b] == want, "%s ISOLATED pivot set %d: %d vs %d", name, b, iso[b], want);
  }

  // Both greedy loops against the pinned rule, then the outputs.
  for (int obj = 0; obj < 2; obj++) {
    const todre_cuda_obj o = obj ? TODRE_CUDA_OBJ_MAXMIN : TODRE_CUDA_OBJ_SUM;
    Dev<int64_t> sel_g_d(std::vector<int64_t>(K, -9));
    CHECK_CUDA(todre_cuda_launch_greedy_gram(o, segs_d.p, 0, nseg, 50, pivot_d.p, flags_d.p,
                                             inv_d.p, gram_d.p, sel_g_d.p, nullptr));
    run_queue("greedy GRAM");
    std::vector<int64_t> sel_g = sel_g_d.get();
    std::vector<todre_cuda_seg> gs = segs;
    std::vector<int> gl_seg;
    std::vector<int64_t> gl_w0;
    int64_t W = 0;
    int kmax = 0;
    for (int b = 0; b < nseg; b++) {
      gs[b].gemv = 1;
      gl_seg.push_back(b);
      gl_w0.push_back(W);
      W += ns[b];
      kmax = std::max(kmax, ks[b]);
    }
    gl_w0.push_back(W);
    Dev<todre_cuda_seg> gs_d(gs);
    Dev<int> gl_seg_d(gl_seg);
    Dev<int64_t> gl_w0_d(gl_w0);
    // 1 and 3 SMs: one block, and several blocks whose warps span sets.
    for (int sms : {1, 3}) {
      Dev<float> cost_d(W);
      Dev<unsigned long long> keys_d(std::vector<unsigned long long>(3 * nseg, ~0ull));
      Dev<int64_t> sel_v_d(std::vector<int64_t>(K, -9));
      CHECK_CUDA(todre_cuda_launch_greedy_gemv(o, &emb, gs_d.p, gl_seg_d.p, gl_w0_d.p, nseg, W, kmax,
                                               pivot_d.p, flags_d.p, inv_d.p, cost_d.p, keys_d.p,
                                               sel_v_d.p, sms, nullptr));
      run_queue("greedy GEMV");
      std::vector<int64_t> sel_v = sel_v_d.get();
      for (int b = 0; b < nseg; b++) {
        std::vector<int64_t> ref;
        ref_greedy(obj, gram.data() + segs[b].gram_off, inv.data() + rowoff[b], ns[b], ks[b],
                   pivot[b], ref);
        for (int t = 0; t < ks[b]; t++) {
          if (sms == 1)
            CHECK(sel_g[segs[b].out0 + t] == ref[t], "%s obj %d GRAM set %d step %d: %ld vs %ld",
                  name, obj, b, t, (long)sel_g[segs[b].out0 + t], (long)ref[t]);
          CHECK(sel_v[segs[b].out0 + t] == ref[t], "%s obj %d GEMV (%d SMs) set %d step %d: %ld vs %ld",
                name, obj, sms, b, t, (long)sel_v[segs[b].out0 + t], (long)ref[t]);
        }
      }
    }
    // Position order, and a set flagged non-finite poisoned with -1.
    std::vector<int> fl = flags_d.get();
    fl[2] = 1;
    Dev<int> fl_d(fl);
    Dev<unsigned char> fmap_d(std::vector<unsigned char>(N, 7));
    Dev<int64_t> pos_d(std::vector<int64_t>(K, -9));
    CHECK_CUDA(todre_cuda_launch_finalize(segs_d.p, nseg, fl_d.p, sel_g_d.p, sel_g_d.p, pos_d.p,
                                          fmap_d.p, nullptr));
    run_queue("finalize");
    std::vector<int64_t> sel_f = sel_g_d.get(), pos = pos_d.get();
    for (int b = 0; b < nseg; b++) {
      std::vector<int64_t> s(sel_f.begin() + segs[b].out0, sel_f.begin() + segs[b].out0 + ks[b]);
      std::vector<int64_t> p(pos.begin() + segs[b].out0, pos.begin() + segs[b].out0 + ks[b]);
      if (b == 2) {
        for (int t = 0; t < ks[b]; t++) CHECK(s[t] == -1 && p[t] == -1, "%s poison", name);
        continue;
      }
      std::sort(s.begin(), s.end());
      CHECK(s == p, "%s positions set %d", name, b);
    }
  }

  // CLS_TOPK: keys (set, descending value), rows, one CUB radix sort, take.
  std::vector<float> clsf(N);
  for (auto &x : clsf) x = (float)(int)(nrm() * 3);  // many ties
  Dev<float> clsf_d(clsf);
  Dev<unsigned long long> kk_d(N), sorted_d(N);
  Dev<uint32_t> rows_d(2 * N);
  Dev<int64_t> selt_d(std::vector<int64_t>(K, -9));
  size_t tmp_bytes = 0;
  CHECK_CUDA(todre_cuda_topk_sort(nullptr, &tmp_bytes, kk_d.p, sorted_d.p, rows_d.p, rows_d.p + N,
                                  N, nseg, nullptr));
  Dev<char> tmp_d(tmp_bytes);
  CHECK_CUDA(todre_cuda_launch_topk_keys(clsf_d.p, N, rowoff_d.p, nseg, kk_d.p, rows_d.p, nullptr));
  CHECK_CUDA(todre_cuda_topk_sort(tmp_d.p, &tmp_bytes, kk_d.p, sorted_d.p, rows_d.p, rows_d.p + N,
                                  N, nseg, nullptr));
  CHECK_CUDA(todre_cuda_launch_topk_take(segs_d.p, nseg, rows_d.p + N, selt_d.p, nullptr));
  run_queue("CLS_TOPK");
  std::vector<uint32_t> rows = rows_d.get();
  std::vector<int64_t> selt = selt_d.get();
  for (int b = 0; b < nseg; b++) {
    std::vector<int> idx(ns[b]);
    for (int i = 0; i < ns[b]; i++) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int x, int y) { return clsf[rowoff[b] + x] > clsf[rowoff[b] + y]; });
    for (int i = 0; i < ns[b]; i++)
      CHECK((int)rows[N + rowoff[b] + i] == idx[i], "%s topk order set %d rank %d", name, b, i);
    for (int t = 0; t < ks[b]; t++)
      CHECK(selt[segs[b].out0 + t] == idx[t], "%s topk take set %d rank %d", name, b, t);
  }

  // A NaN flags its set only, and the sticky flag's embeddings bit.
  E[(rowoff[3] + 2) * ld + 1] = conv<T>(NAN);
  E_d.put(E);
  flags_d.put(std::vector<int>(nseg + 1, 0));
  sticky_d.put(std::vector<int>(1, 0));
  CHECK_CUDA(todre_cuda_launch_rownorm(&emb, N, rowoff_d.p, nseg, inv_d.p, flags_d.p, sticky_d.p,
                                       nullptr));
  run_queue("rownorm with NaN");
  std::vector<int> flags = flags_d.get();
  CHECK(flags[3] == 1 && flags[0] == 0 && flags[2] == 0 && sticky_d.get()[0] == 1, "%s NaN flags",
        name);
  printf("%s: select kernels checked\n", name);
}

// Finite rows whose similarity is NaN on the device: row 5 is made only of a
// subnormal in a column every other row leaves 0, so 1/||e_5|| overflows fp32
// to inf and s(c, 5) = 0 * inf = NaN for every c. The row must never be
// taken before a row whose cost is a number (both objectives, both greedy
// loops), and never win the ISOLATED pivot (its score stays NaN, which
// sorts last, while the other rows' scores ignore the NaN pair).
static void test_nan_similarity() {
  const int n = 6, d = 8;
  std::vector<float> E((size_t)n * d, 0.f);
  for (int r = 0; r < 5; r++)
    for (int e = 0; e < 7; e++) E[r * d + e] = (float)(nrm() + 1.0);
  E[5 * d + 7] = 1e-40f;  // subnormal
  std::vector<int64_t> rowoff = {0, n};
  Dev<float> E_d(E);
  Dev<int64_t> rowoff_d(rowoff);
  Dev<float> inv_d(n), score_d(n);
  Dev<int> flags_d(std::vector<int>(2, 0)), sticky_d(std::vector<int>(1, 0));
  const todre_cuda_emb emb = {E_d.p, TODRE_DTYPE_F32, d, d, 0};
  CHECK_CUDA(todre_cuda_launch_rownorm(&emb, n, rowoff_d.p, 1, inv_d.p, flags_d.p, sticky_d.p,
                                       nullptr));
  run_queue("rownorm (NaN similarity)");
  std::vector<float> inv = inv_d.get();
  CHECK(std::isinf(inv[5]) && flags_d.get()[0] == 0, "NaN similarity: premise (inv[5] = %g)",
        inv[5]);
  std::vector<float> gram((size_t)n * n);
  for (int u = 0; u < n; u++)
    for (int v = 0; v < n; v++) {
      double s = 0;
      for (int e = 0; e < d; e++) s += (double)E[u * d + e] * E[v * d + e];
      gram[(size_t)u * n + v] = (float)s;
    }
  Dev<float> gram_d(gram);

  // ISOLATED: row 5's score is NaN, the others are numbers; 5 is not the pivot.
  std::vector<todre_cuda_seg> seg = {{0, 0, 0, n, n, 0, n, -1, 0}};
  Dev<todre_cuda_seg> seg_d(seg);
  Dev<int> iso_d(std::vector<int>(1, -5));
  CHECK_CUDA(todre_cuda_launch_rowmax(gram_d.p, n, n, 0, n, inv_d.p, score_d.p, nullptr));
  CHECK_CUDA(todre_cuda_launch_pivot(seg_d.p, 0, 1, 0, TODRE_CUDA_PIVOT_ARGMIN, score_d.p, iso_d.p,
                                     nullptr));
  run_queue("ISOLATED (NaN similarity)");
  std::vector<float> score = score_d.get();
  for (int v = 0; v < 5; v++) CHECK(std::isfinite(score[v]), "NaN similarity: score[%d] = %g", v, score[v]);
  CHECK(std::isnan(score[5]), "NaN similarity: score[5] = %g, want NaN", score[5]);
  CHECK(iso_d.get()[0] != 5, "NaN similarity: ISOLATED pivot is the NaN row");

  // Both loops, both objectives, from pivot 0: row 5 comes last.
  Dev<int> pivot_d(std::vector<int>(1, 0));
  std::vector<todre_cuda_seg> gseg = seg;
  gseg[0].gemv = 1;
  Dev<todre_cuda_seg> gseg_d(gseg);
  Dev<int> gl_seg_d(std::vector<int>(1, 0));
  Dev<int64_t> gl_w0_d(std::vector<int64_t>{0, n});
  for (int obj = 0; obj < 2; obj++) {
    const todre_cuda_obj o = obj ? TODRE_CUDA_OBJ_MAXMIN : TODRE_CUDA_OBJ_SUM;
    std::vector<int64_t> ref;
    ref_greedy(obj, gram.data(), inv.data(), n, n, 0, ref);
    CHECK(ref[n - 1] == 5, "NaN similarity: reference rule takes row 5 at step %d",
          (int)(std::find(ref.begin(), ref.end(), 5) - ref.begin()));
    Dev<int64_t> sel_g_d(std::vector<int64_t>(n, -9)), sel_v_d(std::vector<int64_t>(n, -9));
    Dev<float> cost_d(n);
    Dev<unsigned long long> keys_d(std::vector<unsigned long long>(3, ~0ull));
    CHECK_CUDA(todre_cuda_launch_greedy_gram(o, seg_d.p, 0, 1, n, pivot_d.p, flags_d.p, inv_d.p,
                                             gram_d.p, sel_g_d.p, nullptr));
    CHECK_CUDA(todre_cuda_launch_greedy_gemv(o, &emb, gseg_d.p, gl_seg_d.p, gl_w0_d.p, 1, n, n,
                                             pivot_d.p, flags_d.p, inv_d.p, cost_d.p, keys_d.p,
                                             sel_v_d.p, 1, nullptr));
    run_queue("greedy (NaN similarity)");
    std::vector<int64_t> sg = sel_g_d.get(), sv = sel_v_d.get();
    CHECK(sg == ref, "NaN similarity: obj %d GRAM order differs from the rule (row 5 at step %d)",
          obj, (int)(std::find(sg.begin(), sg.end(), 5) - sg.begin()));
    CHECK(sv == ref, "NaN similarity: obj %d GEMV order differs from the rule (row 5 at step %d)",
          obj, (int)(std::find(sv.begin(), sv.end(), 5) - sv.begin()));
  }
  printf("NaN similarities: checked\n");
}

// ---- stage 2 ----
static void ref_sums(const double *A, int H, int Q, int K, const uint8_t *ty, double *s4) {
  for (int i = 0; i < 4; i++) s4[i] = 0;
  for (int h = 0; h < H; h++)
    for (int i = 0; i < Q; i++) {
      int qt = ty[K - Q + i];
      if (qt == 0) continue;
      int tg = qt == 2 ? 1 : 2;
      double num = 0, tot = 0;
      for (int j = 0; j < K; j++) {
        double a = A[((size_t)h * Q + i) * K + j];
        tot += a;
        if (ty[j] == tg) num += a;
      }
      if (qt == 2) {
        s4[0] += num;
        s4[1] += tot;
      } else {
        s4[2] += num;
        s4[3] += tot;
      }
    }
}

// The fused Q/K kernel's launch shape (todre_cuda_qk_shape): the splits
// cover K in whole key tiles with none empty, and the split states stay
// under 8192 tiles (3 MiB) for long contexts and ragged batches; the text
// rows of [sys|vis|text] get the most splits, a question-first prefill one.
static void check_shape(const char *what, int64_t B, int64_t H, int64_t Q, int64_t K,
                        const std::vector<uint8_t> &types, const std::vector<uint8_t> &active,
                        int64_t want_slots, int64_t want_splits) {
  todre_relevance_common c = {B, H, Q, K, types.data(), active.data(), nullptr};
  const int64_t tiles = (Q + TODRE_CUDA_QK_ROWS - 1) / TODRE_CUDA_QK_ROWS;
  int64_t slots = -1, splits = -1, keys = -1;
  todre_cuda_qk_shape(&c, tiles, &slots, &splits, &keys);
  CHECK(slots >= 1 && slots <= tiles, "%s: slots %lld of %lld tiles", what, (long long)slots,
        (long long)tiles);
  CHECK(splits >= 1 && keys % TODRE_CUDA_QK_KEY_TILE == 0 && splits * keys >= K &&
            (splits - 1) * keys < K,
        "%s: %lld splits of %lld keys for K = %lld", what, (long long)splits, (long long)keys,
        (long long)K);
  CHECK(splits == 1 || B * H * slots * splits <= 8192, "%s: %lld split-state tiles", what,
        (long long)(B * H * slots * splits));
  if (want_slots >= 0)
    CHECK(slots == want_slots, "%s: slots %lld, want %lld", what, (long long)slots,
          (long long)want_slots);
  if (want_splits >= 0)
    CHECK(splits == want_splits, "%s: splits %lld, want %lld", what, (long long)splits,
          (long long)want_splits);
}

static std::vector<uint8_t> layout(int64_t sys, int64_t txt1, int64_t vis, int64_t txt2) {
  std::vector<uint8_t> t;
  t.insert(t.end(), sys, 0);
  t.insert(t.end(), txt1, 2);
  t.insert(t.end(), vis, 1);
  t.insert(t.end(), txt2, 2);
  return t;
}

static void test_qk_shape() {
  // [sys 35 | vis 2880 | text 40], 32 heads: 2 tiles hold the text rows.
  check_shape("llava", 1, 32, 2955, 2955, layout(35, 0, 2880, 40), {1}, 2, 12);
  // question first: every visual row is needed, one split (no states).
  check_shape("question first", 1, 32, 3015, 3015, layout(35, 40, 2880, 60), {1}, 93, 1);
  // a long video: 131,072 positions, 100 text rows at the end.
  check_shape("long", 1, 32, 131072, 131072, layout(35, 0, 130937, 100), {1}, 4, -1);
  // a chunk of it: the last 1000 queries over all keys.
  check_shape("long chunk", 1, 32, 1000, 131072, layout(35, 0, 130937, 100), {1}, 4, -1);
  // 64 sequences, one active (4 text tiles: 16 splits alone), 63 dropped:
  // the states of 64 * 32 heads * 4 slots would pass the bound, one split.
  {
    std::vector<uint8_t> t, act(64, 0);
    std::vector<uint8_t> one = layout(35, 0, 16249, 100);
    for (int b = 0; b < 64; b++) t.insert(t.end(), one.begin(), one.end());
    check_shape("one of 1", 1, 32, 16384, 16384, one, {1}, 4, 16);
    act[5] = 1;
    check_shape("one of 64", 64, 32, 16384, 16384, t, act, 4, 1);
  }
  // no needed row (text only): one slot, one split.
  check_shape("text only", 1, 4, 100, 100, layout(0, 100, 0, 0), {1}, 1, 1);
  printf("qk launch shapes checked\n");
}

static void test_relevance() {
  const int B = 2, H = 4, Hkv = 2, K = 75, dh = 40;
  for (int Q : {75, 20}) {
    std::vector<uint8_t> types(B * K);
    for (int j = 0; j < K; j++) {
      types[j] = j < 3 ? 0 : j < 50 ? 1 : 2;                      // [sys | vis | text]
      types[K + j] = j < 2 ? 0 : j < 12 ? 2 : j < 60 ? 1 : 2;     // question first
    }
    std::vector<float> q((size_t)B * H * Q * dh), k((size_t)B * Hkv * K * dh);
    for (auto &x : q) x = (float)nrm();
    for (auto &x : k) x = (float)nrm();
    double scale = 1 / sqrt((double)dh);
    // Reference probabilities (double), [B, H, Q, K].
    std::vector<double> A((size_t)B * H * Q * K, 0.0);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < Q; i++) {
          int pos = K - Q + i, g = h / (H / Hkv);
          double m = -1e300;
          std::vector<double> s(K);
          for (int j = 0; j <= pos; j++) {
            double t = 0;
            for (int e = 0; e < dh; e++)
              t += (double)q[(((size_t)b * H + h) * Q + i) * dh + e] * k[(((size_t)b * Hkv + g) * K + j) * dh + e];
            s[j] = t * scale;
            m = std::max(m, s[j]);
          }
          double z = 0;
          for (int j = 0; j <= pos; j++) z += exp(s[j] - m);
          for (int j = 0; j <= pos; j++) A[(((size_t)b * H + h) * Q + i) * K + j] = exp(s[j] - m) / z;
        }
    std::vector<int64_t> fv(B, K), ft(B, K);
    for (int b = 0; b < B; b++)
      for (int j = K - 1; j >= 0; j--) {
        if (types[b * K + j] == 1) fv[b] = j;
        if (types[b * K + j] == 2) ft[b] = j;
      }
    Dev<uint8_t> types_d(types), active_d(std::vector<uint8_t>{1, 1});
    Dev<int64_t> fv_d(fv), ft_d(ft);
    const todre_cuda_rel_tables tb = {types_d.p, active_d.p, fv_d.p, ft_d.p};

    // Fused Q/K kernel and its reduction: the keys in one split of 128 (the
    // block sums its tile) and in two splits of 64 (row states merged by
    // k_qk_combine); the launcher's contract: whole key tiles, every key in
    // some split, at least one slot. The tile sums start at -1: the launcher
    // zeroes them (tiles before a sequence's first needed row get no block).
    const int tiles = (Q + TODRE_CUDA_QK_ROWS - 1) / TODRE_CUDA_QK_ROWS;
    Dev<float> q_d(q), k_d(k);
    for (int splits : {1, 2}) {
      const int64_t split_keys = splits == 1 ? 128 : 64;
      Dev<double> part_d(std::vector<double>((size_t)B * H * tiles * 2, -1)),
          sums_d(std::vector<double>(4 * B + 1, 0));
      Dev<float> rowpart_d(std::vector<float>((size_t)B * H * tiles * splits * TODRE_CUDA_QK_ROWS * 3,
                                              -7.0f));
      Dev<int> bad_d(std::vector<int>(1, 0));
      todre_cuda_qk_args a;
      a.q = q_d.p;
      a.k = k_d.p;
      a.H = H; a.H_kv = Hkv; a.Q = Q; a.K = K; a.dh = dh;
      a.qs_b = (int64_t)H * Q * dh; a.qs_h = (int64_t)Q * dh; a.qs_q = dh; a.qs_d = 1;
      a.ks_b = (int64_t)Hkv * K * dh; a.ks_h = (int64_t)K * dh; a.ks_k = dh; a.ks_d = 1;
      a.scale_log2 = (float)(scale * 1.4426950408889634);
      a.tb = tb;
      a.slots = tiles;     // every tile may get a block (the kernel skips those before
                           // each sequence's first tile with a needed row)
      a.splits = 1;
      a.split_keys = 64;   // 64 < K = 75: a key left out
      a.rowpart = rowpart_d.p;
      a.part = part_d.p;
      a.nonfinite = bad_d.p;
      CHECK(todre_cuda_launch_qk(&a, TODRE_DTYPE_F32, B, nullptr) == cudaErrorInvalidValue,
            "qk launch that leaves keys out is refused");
      a.splits = 3;        // an empty split
      CHECK(todre_cuda_launch_qk(&a, TODRE_DTYPE_F32, B, nullptr) == cudaErrorInvalidValue,
            "qk launch with an empty split is refused");
      a.splits = splits;
      a.split_keys = split_keys;
      a.slots = 0;
      CHECK(todre_cuda_launch_qk(&a, TODRE_DTYPE_F32, B, nullptr) == cudaErrorInvalidConfiguration,
            "qk launch without slots is refused");
      a.slots = tiles;
      CHECK_CUDA(todre_cuda_launch_qk(&a, TODRE_DTYPE_F32, B, nullptr));
      CHECK_CUDA(todre_cuda_launch_reduce_tiles(part_d.p, B, H, tiles, sums_d.p, nullptr));
      run_queue("q/k kernels");
      std::vector<double> sums = sums_d.get();
      for (int b = 0; b < B; b++) {
        double s4[4];
        ref_sums(A.data() + (size_t)b * H * Q * K, H, Q, K, types.data() + b * K, s4);
        CHECK(fabs(sums[4 * b + 0] - s4[0]) < 1e-5 * (1 + s4[0]),
              "qk Q %d splits %d b %d t2v num %g vs %g", Q, splits, b, sums[4 * b], s4[0]);
        CHECK(fabs(sums[4 * b + 2] - s4[2]) < 1e-5 * (1 + s4[2]),
              "qk Q %d splits %d b %d v2t num %g vs %g", Q, splits, b, sums[4 * b + 2], s4[2]);
      }
      CHECK(bad_d.get()[0] == 0, "qk nonfinite flag on finite input");
    }

    // Probabilities: f16 in a [B, Q, H, K + 3] buffer viewed as [B, H, Q, K]
    // (misaligned rows), scalar and vector loads.
    for (int vec = 0; vec < 2; vec++) {
      const int Kp = K + 3;
      std::vector<__half> Ah((size_t)B * Q * H * Kp, __half{0});
      std::vector<double> Aq((size_t)B * H * Q * K);
      for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
          for (int i = 0; i < Q; i++)
            for (int j = 0; j < K; j++) {
              __half x = {todre_f32_to_f16((float)A[(((size_t)b * H + h) * Q + i) * K + j])};
              Ah[(((size_t)b * Q + i) * H + h) * Kp + j] = x;
              Aq[(((size_t)b * H + h) * Q + i) * K + j] = __half2float(x);
            }
      Dev<__half> Ah_d(Ah);
      Dev<double> rows_d((size_t)B * H * Q * 2), s2_d(std::vector<double>(4 * B + 1, 0));
      Dev<int> bad2_d(std::vector<int>(1, 0));
      CHECK_CUDA(todre_cuda_launch_probs_rows(Ah_d.p, TODRE_DTYPE_F16, B, H, Q, K,
                                              (int64_t)Q * H * Kp, Kp, (int64_t)H * Kp, 1, vec, tb,
                                              rows_d.p, bad2_d.p, nullptr));
      CHECK_CUDA(todre_cuda_launch_reduce_rows(rows_d.p, B, H, Q, K, tb, s2_d.p, nullptr));
      run_queue("probability kernels");
      std::vector<double> s2 = s2_d.get();
      for (int b = 0; b < B; b++) {
        double s4[4];
        ref_sums(Aq.data() + (size_t)b * H * Q * K, H, Q, K, types.data() + b * K, s4);
        for (int x = 0; x < 4; x++)
          CHECK(fabs(s2[4 * b + x] - s4[x]) < 1e-5 * (1 + s4[x]), "probs vec %d Q %d b %d sum %d: %g vs %g",
                vec, Q, b, x, s2[4 * b + x], s4[x]);
      }
      CHECK(bad2_d.get()[0] == 0, "probs nonfinite flag on finite input");
    }
  }
  printf("relevance kernels checked\n");
}

int main() {
  int optin = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK_CUDA(todre_cuda_select_kernels_init(optin));
  CHECK_CUDA(todre_cuda_relevance_kernels_init(optin));
  for (int order = 0; order < 2; order++) {
    emu::set_order(order);
    rng.seed(1);
    printf("-- threads resumed in %s order\n", order ? "descending" : "ascending");
    test_select<float>(24, 27, 0, "f32 d24 scalar");
    test_select<__half>(32, 40, 1, "f16 d32 vector");
    test_select<float>(16, 16, 1, "f32 d16 vector");
    test_nan_similarity();
    test_qk_shape();
    test_relevance();
  }
  todre_emu_counters c;
  todre_emu_get_counters(&c);
  CHECK(c.violations == 0, "%llu contract violations reported by the emulator (see stderr)",
        (unsigned long long)c.violations);
  printf("%s (%d failures)\n", failures ? "FAILED" : "all kernels agree", failures);
  return failures != 0;
}
