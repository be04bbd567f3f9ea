// The CUDA kernels of libtodre-cuda, run on the CPU (src/cuda/emu/fake) and
// checked against float64 / float references: norms and the non-finite flags,
// CENTER and ISOLATED pivot scores, both greedy loops (Gram block loop and the
// cooperative matrix-vector loop, MAX_SUM and MAX_MIN) against the pinned
// greedy rule, the position order and -1 poisoning, CLS_TOPK key order, and
// the stage-2 sums from Q/K (GQA, chunked prefill, question-first layout) and
// from probabilities (vector loads on misaligned rows).
//
// This checks the kernels' logic (indexing, reductions, barriers, the
// triple-buffered keys) on machines without a GPU. It does not replace
// unit.cuda_parity on a GPU (cuBLAS, launches, memory, real warps).
#include <cstdio>
#include <cstdlib>
#include <random>
#include <algorithm>
#include <vector>
#include "cuda_runtime.h"
#include "cub/block/block_scan.cuh"
#include "device_util.cuh"
#include "select_kernels.h"
using namespace todre_cuda;
namespace selk {
#include "select_kernels.inc"
}
namespace relk {
#include "relevance.inc"
}
static int failures = 0;
#define CHECK(c, ...) do { if (!(c)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)


static std::mt19937_64 rng(1);
static double nrm() { static std::normal_distribution<double> d; return d(rng); }

static void ref_greedy(int obj, const std::vector<float> &G, const float *inv, int n, int k, int p, std::vector<int64_t> &sel) {
  std::vector<float> cost(n, obj == 0 ? 0.f : -INFINITY);
  int c = p; sel.clear();
  for (int t = 0;; t++) {
    sel.push_back(c);
    if (t == k - 1) break;
    float ic = inv[c]; uint64_t best = ~0ull;
    for (int v = 0; v < n; v++) {
      float x = cost[v];
      if (v == c) x = INFINITY;
      else if (x != INFINITY) { float sim = G[(size_t)c * n + v] * ic * inv[v]; x = obj == 0 ? x + sim : fmaxf(x, sim - 1.f); }
      cost[v] = x;
      float f = x + 0.0f; unsigned b; memcpy(&b, &f, 4); b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
      uint64_t key = ((uint64_t)b << 32) | (unsigned)v; best = std::min(best, key);
    }
    c = (int)(best & 0xffffffffu);
  }
}

template <typename T> static T conv(float f);
template <> float conv<float>(float f) { return f; }
template <> __half conv<__half>(float f) { return {todre_f32_to_f16(f)}; }

template <typename T>
static void test_select(int d, int ld, int vec, const char *name) {
  std::vector<int> ns = {37, 1, 50, 9};
  int nseg = ns.size();
  std::vector<int64_t> rowoff(nseg + 1, 0);
  for (int b = 0; b < nseg; b++) rowoff[b + 1] = rowoff[b] + ns[b];
  int64_t N = rowoff[nseg];
  std::vector<T> E((size_t)N * ld);
  std::vector<double> Ed((size_t)N * ld);
  for (int64_t r = 0; r < N; r++) for (int e = 0; e < ld; e++) {
    float x = e < d ? (float)(nrm() + (r % 3)) : NAN; E[r * ld + e] = conv<T>(x); Ed[r * ld + e] = todre_cuda::to_f32(E[r * ld + e]); }
  for (int e = 0; e < d; e++) { E[5 * ld + e] = conv<T>(0.f); Ed[5 * ld + e] = 0; } // zero row
  std::vector<float> inv(N); std::vector<int> flags(nseg + 1, 0); int sticky = 0;
  emu::launch(dim3((N + 7) / 8), dim3(256), false, [&] { selk::k_rownorm<T>(E.data(), ld, d, vec, N, rowoff.data(), nseg, inv.data(), flags.data(), &sticky); });
  for (int64_t r = 0; r < N; r++) { double ss = 0; for (int e = 0; e < d; e++) ss += Ed[r * ld + e] * Ed[r * ld + e];
    double want = ss > 0 ? 1 / sqrt(ss) : 0; CHECK(fabs(inv[r] - want) <= 1e-6 * want, "%s inv[%ld] %g vs %g", name, (long)r, inv[r], want); }
  CHECK(sticky == 0, "%s sticky", name);
  // segments
  std::vector<todre_cuda_seg> segs(nseg);
  std::vector<int> ks = {10, 1, 50, 3};
  int64_t out0 = 0, goff = 0;
  for (int b = 0; b < nseg; b++) { segs[b] = {rowoff[b], out0, goff, ns[b], ks[b], 0, ns[b], -1, 0}; out0 += ks[b]; goff += (int64_t)ns[b] * ns[b]; }
  segs[0].lo = 3; segs[0].hi = 30;
  int64_t K = out0;
  // raw Gram
  std::vector<float> gram(goff);
  for (int b = 0; b < nseg; b++) for (int u = 0; u < ns[b]; u++) for (int v = 0; v < ns[b]; v++) {
    double s = 0; for (int e = 0; e < d; e++) s += Ed[(rowoff[b] + u) * ld + e] * Ed[(rowoff[b] + v) * ld + e];
    gram[segs[b].gram_off + (int64_t)u * ns[b] + v] = (float)s; }
  // CENTER pivot
  int chunks = 3;
  std::vector<float> mu((size_t)nseg * d * (chunks + 1)), score(N, 0.f);
  float *partial = mu.data() + (size_t)nseg * d;
  emu::launch(dim3(nseg, (d + 127) / 128, chunks), dim3(128), false, [&] { selk::k_mu_partial<T>(E.data(), ld, d, segs.data(), chunks, inv.data(), partial); });
  emu::launch(dim3(nseg, (d + 255) / 256), dim3(256), false, [&] { selk::k_mu_final(segs.data(), chunks, d, partial, mu.data()); });
  emu::launch(dim3((N + 7) / 8), dim3(256), false, [&] { selk::k_center_score<T>(E.data(), ld, d, vec, N, segs.data(), rowoff.data(), nseg, inv.data(), mu.data(), score.data()); });
  std::vector<int> pivot(nseg, -5);
  emu::launch(dim3(nseg), dim3(256), false, [&] { selk::k_pivot(segs.data(), 0, -1, 0, score.data(), pivot.data()); });
  for (int b = 0; b < nseg; b++) {
    std::vector<double> m(d, 0); int lo = segs[b].lo, hi = segs[b].hi;
    for (int v = lo; v < hi; v++) for (int e = 0; e < d; e++) m[e] += Ed[(rowoff[b] + v) * ld + e] * inv[rowoff[b] + v] / (hi - lo);
    int best = lo; double bs = -1e300;
    for (int v = lo; v < hi; v++) { double s = 0; for (int e = 0; e < d; e++) s += Ed[(rowoff[b] + v) * ld + e] * m[e]; s *= inv[rowoff[b] + v]; if (s > bs + 1e-9) { bs = s; best = v; } }
    CHECK(pivot[b] == best, "%s CENTER pivot set %d: %d vs %d", name, b, pivot[b], best);
  }
  // ISOLATED scores from Gram via rowmax
  for (int b = 0; b < nseg; b++) {
    int n = ns[b];
    emu::launch(dim3((n + 7) / 8), dim3(256), false, [&] { selk::k_rowmax(gram.data() + segs[b].gram_off, n, n, 0, n, inv.data() + rowoff[b], score.data() + rowoff[b]); });
    for (int v = 0; v < n; v++) { float m = -INFINITY; for (int u = 0; u < n; u++) if (u != v) m = fmaxf(m, gram[segs[b].gram_off + (int64_t)v * n + u] * inv[rowoff[b] + v] * inv[rowoff[b] + u]);
      CHECK(score[rowoff[b] + v] == m, "%s rowmax set %d v %d", name, b, v); }
  }
  for (int obj = 0; obj < 2; obj++) {
    std::vector<int64_t> sel_g(K, -9), sel_v(K, -9), pos(K, -9);
    emu::launch(dim3(nseg), dim3(1024), false, [&] {
      if (obj == 0) selk::k_greedy_gram<0>(segs.data(), 0, pivot.data(), flags.data(), inv.data(), gram.data(), sel_g.data());
      else selk::k_greedy_gram<1>(segs.data(), 0, pivot.data(), flags.data(), inv.data(), gram.data(), sel_g.data()); });
    // GEMV path on the same sets
    std::vector<todre_cuda_seg> gs = segs; std::vector<int> gl_seg; std::vector<int64_t> gl_w0; int64_t W = 0; int kmax = 0;
    for (int b = 0; b < nseg; b++) { gs[b].gemv = 1; gl_seg.push_back(b); gl_w0.push_back(W); W += ns[b]; kmax = std::max(kmax, ks[b]); }
    gl_w0.push_back(W);
    std::vector<float> cost(W); std::vector<unsigned long long> keys(3 * nseg, ~0ull);
    selk::gemv_args a = {E.data(), ld, d, vec, gs.data(), gl_seg.data(), gl_w0.data(), nseg, W, kmax, pivot.data(), flags.data(), inv.data(), cost.data(), keys.data(), sel_v.data()};
    emu::launch(dim3(3), dim3(64), true, [&] { if (obj == 0) selk::k_greedy_gemv<T, 0>(a); else selk::k_greedy_gemv<T, 1>(a); });
    for (int b = 0; b < nseg; b++) {
      std::vector<int64_t> ref; ref_greedy(obj, std::vector<float>(gram.begin() + segs[b].gram_off, gram.begin() + segs[b].gram_off + (int64_t)ns[b] * ns[b]), inv.data() + rowoff[b], ns[b], ks[b], pivot[b], ref);
      for (int t = 0; t < ks[b]; t++) {
        CHECK(sel_g[segs[b].out0 + t] == ref[t], "%s obj %d gram set %d step %d: %ld vs %ld", name, obj, b, t, (long)sel_g[segs[b].out0 + t], (long)ref[t]);
        CHECK(sel_v[segs[b].out0 + t] == ref[t], "%s obj %d gemv set %d step %d: %ld vs %ld", name, obj, b, t, (long)sel_v[segs[b].out0 + t], (long)ref[t]);
      }
    }
    // positions, and a poisoned set
    std::vector<unsigned char> fmap(N, 7);
    std::vector<int> fl = flags; fl[2] = 1;
    emu::launch(dim3(nseg), dim3(512), false, [&] { selk::k_finalize(segs.data(), fl.data(), sel_g.data(), sel_g.data(), pos.data(), fmap.data()); });
    for (int b = 0; b < nseg; b++) {
      std::vector<int64_t> s(sel_g.begin() + segs[b].out0, sel_g.begin() + segs[b].out0 + ks[b]);
      std::vector<int64_t> p(pos.begin() + segs[b].out0, pos.begin() + segs[b].out0 + ks[b]);
      if (b == 2) { for (int t = 0; t < ks[b]; t++) CHECK(s[t] == -1 && p[t] == -1, "%s poison", name); continue; }
      std::sort(s.begin(), s.end()); CHECK(s == p, "%s positions set %d", name, b);
    }
  }
  // top-k keys order
  std::vector<float> clsf(N); for (auto &x : clsf) x = (float)(int)(nrm() * 3); // many ties
  std::vector<unsigned long long> kk(N);
  emu::launch(dim3((N + 255) / 256), dim3(256), false, [&] { selk::k_topk_keys(clsf.data(), N, rowoff.data(), nseg, kk.data()); });
  for (int b = 0; b < nseg; b++) {
    std::vector<unsigned long long> s(kk.begin() + rowoff[b], kk.begin() + rowoff[b + 1]); std::sort(s.begin(), s.end());
    std::vector<int> idx(ns[b]); for (int i = 0; i < ns[b]; i++) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return clsf[rowoff[b] + x] > clsf[rowoff[b] + y]; });
    for (int i = 0; i < ns[b]; i++) CHECK((int)(s[i] & 0xffffffffu) == idx[i], "%s topk set %d rank %d", name, b, i);
  }
  // NaN flagging
  E[(rowoff[3] + 2) * ld + 1] = conv<T>(NAN); std::fill(flags.begin(), flags.end(), 0); sticky = 0;
  emu::launch(dim3((N + 7) / 8), dim3(256), false, [&] { selk::k_rownorm<T>(E.data(), ld, d, vec, N, rowoff.data(), nseg, inv.data(), flags.data(), &sticky); });
  CHECK(flags[3] == 1 && flags[0] == 0 && flags[2] == 0 && sticky == 1, "%s NaN flags", name);
  printf("%s: select kernels checked\n", name);
}

// ---- stage 2 ----
static void ref_sums(const std::vector<double> &A, int H, int Q, int K, const uint8_t *ty, double *s4) {
  for (int i = 0; i < 4; i++) s4[i] = 0;
  for (int h = 0; h < H; h++) for (int i = 0; i < Q; i++) { int qt = ty[K - Q + i]; if (qt == 0) continue; int tg = qt == 2 ? 1 : 2;
    double num = 0, tot = 0; for (int j = 0; j < K; j++) { double a = A[((size_t)h * Q + i) * K + j]; tot += a; if (ty[j] == tg) num += a; }
    if (qt == 2) { s4[0] += num; s4[1] += tot; } else { s4[2] += num; s4[3] += tot; } }
}

static void test_relevance() {
  const int B = 2, H = 4, Hkv = 2, K = 75, dh = 40;
  for (int Q : {75, 20}) {
    std::vector<uint8_t> types(B * K);
    for (int j = 0; j < K; j++) { types[j] = j < 3 ? 0 : j < 50 ? 1 : 2; types[K + j] = j < 2 ? 0 : j < 12 ? 2 : j < 60 ? 1 : 2; }
    std::vector<float> q((size_t)B * H * Q * dh), k((size_t)B * Hkv * K * dh);
    for (auto &x : q) x = (float)nrm(); for (auto &x : k) x = (float)nrm();
    double scale = 1 / sqrt((double)dh);
    // reference probabilities (double), stored [B,H,Q,K]
    std::vector<double> A((size_t)B * H * Q * K, 0.0);
    for (int b = 0; b < B; b++) for (int h = 0; h < H; h++) for (int i = 0; i < Q; i++) {
      int pos = K - Q + i, g = h / (H / Hkv); double m = -1e300; std::vector<double> s(K);
      for (int j = 0; j <= pos; j++) { double t = 0; for (int e = 0; e < dh; e++) t += (double)q[(((size_t)b * H + h) * Q + i) * dh + e] * k[(((size_t)b * Hkv + g) * K + j) * dh + e]; s[j] = t * scale; m = std::max(m, s[j]); }
      double z = 0; for (int j = 0; j <= pos; j++) z += exp(s[j] - m);
      for (int j = 0; j <= pos; j++) A[(((size_t)b * H + h) * Q + i) * K + j] = exp(s[j] - m) / z; }
    std::vector<uint8_t> active = {1, 1};
    std::vector<int64_t> fv(B, K), ft(B, K);
    for (int b = 0; b < B; b++) for (int j = K - 1; j >= 0; j--) { if (types[b * K + j] == 1) fv[b] = j; if (types[b * K + j] == 2) ft[b] = j; }
    relk::rel_tables tb = {types.data(), active.data(), fv.data(), ft.data()};
    // qk kernel
    int tiles = (Q + 31) / 32; std::vector<double> part((size_t)B * H * tiles * 2, -1), sums(4 * B + 1, 0); int bad = 0;
    relk::qk_args a; a.q = q.data(); a.k = k.data(); a.H = H; a.H_kv = Hkv; a.Q = Q; a.K = K; a.dh = dh;
    a.qs_b = (int64_t)H * Q * dh; a.qs_h = (int64_t)Q * dh; a.qs_q = dh; a.qs_d = 1;
    a.ks_b = (int64_t)Hkv * K * dh; a.ks_h = (int64_t)K * dh; a.ks_k = dh; a.ks_d = 1;
    a.scale_log2 = (float)(scale * 1.4426950408889634); a.tb = tb; a.part = part.data(); a.nonfinite = &bad;
    emu::launch(dim3(tiles, H, B), dim3(256), false, [&] { relk::k_qk<float>(a); });
    emu::launch(dim3(B), dim3(256), false, [&] { relk::k_reduce_tiles(part.data(), H, tiles, sums.data()); });
    for (int b = 0; b < B; b++) {
      double s4[4]; ref_sums(std::vector<double>(A.begin() + (size_t)b * H * Q * K, A.begin() + (size_t)(b + 1) * H * Q * K), H, Q, K, types.data() + b * K, s4);
      CHECK(fabs(sums[4 * b + 0] - s4[0]) < 1e-5 * (1 + s4[0]), "qk Q %d b %d t2v num %g vs %g", Q, b, sums[4 * b], s4[0]);
      CHECK(fabs(sums[4 * b + 2] - s4[2]) < 1e-5 * (1 + s4[2]), "qk Q %d b %d v2t num %g vs %g", Q, b, sums[4 * b + 2], s4[2]);
    }
    CHECK(bad == 0, "qk nonfinite");
    // probs kernel: f16 data in a [B,Q,H,K+pad] buffer (misaligned rows, vec path), and f32 strided
    for (int vec = 0; vec < 2; vec++) {
      int Kp = K + 3; std::vector<__half> Ah((size_t)B * Q * H * Kp);
      std::vector<double> Aq((size_t)B * H * Q * K);
      for (int b = 0; b < B; b++) for (int h = 0; h < H; h++) for (int i = 0; i < Q; i++) for (int j = 0; j < K; j++) {
        __half x = {todre_f32_to_f16((float)A[(((size_t)b * H + h) * Q + i) * K + j])};
        Ah[(((size_t)b * Q + i) * H + h) * Kp + j] = x; Aq[(((size_t)b * H + h) * Q + i) * K + j] = __half2float(x); }
      std::vector<double> rows((size_t)B * H * Q * 2), s2(4 * B + 1, 0); int bad2 = 0;
      int64_t rowsN = (int64_t)B * H * Q;
      emu::launch(dim3((rowsN + 7) / 8), dim3(256), false, [&] { relk::k_probs_rows<__half>(Ah.data(), B, H, Q, K, (int64_t)Q * H * Kp, Kp, (int64_t)H * Kp, 1, vec, tb, rows.data(), &bad2); });
      emu::launch(dim3(B), dim3(256), false, [&] { relk::k_reduce_rows(rows.data(), H, Q, K, tb, s2.data()); });
      for (int b = 0; b < B; b++) {
        double s4[4]; ref_sums(std::vector<double>(Aq.begin() + (size_t)b * H * Q * K, Aq.begin() + (size_t)(b + 1) * H * Q * K), H, Q, K, types.data() + b * K, s4);
        for (int x = 0; x < 4; x++) CHECK(fabs(s2[4 * b + x] - s4[x]) < 1e-5 * (1 + s4[x]), "probs vec %d Q %d b %d sum %d: %g vs %g", vec, Q, b, x, s2[4 * b + x], s4[x]);
      }
      CHECK(bad2 == 0, "probs nonfinite");
    }
  }
  printf("relevance kernels checked\n");
}

int main() {
  // Threads resumed in ascending, then descending order between barriers: a
  // kernel that reads shared data without the barrier that orders it gets
  // different values in one of the two.
  for (int order = 0; order < 2; order++) {
    emu::set_order(order);
    rng.seed(1);
    printf("-- threads resumed in %s order\n", order ? "descending" : "ascending");
    test_select<float>(24, 27, 0, "f32 d24 scalar");
    test_select<__half>(32, 40, 1, "f16 d32 vector");
    test_select<float>(16, 16, 1, "f32 d16 vector");
    test_relevance();
  }
  printf("%s (%d failures)\n", failures ? "FAILED" : "all kernels agree", failures);
  return failures != 0;
}
