// Weight-streaming matrix products for XLA:CPU, registered through the XLA FFI.
//
// Decoding at batch 1 multiplies a few token vectors (M = 1 for a decode step, gamma + 1 for a
// verification) by every weight matrix of the model, so its cost is reading the weights. XLA's
// dot reaches neither the memory bandwidth nor the arithmetic rate of the cores for small M
// (experiments/speed/REAL.md). This kernel reads each weight once per call:
//
//   y[M, N] = prologue(x[M, K]) @ W (+ bias) (+ residual)
//
// with W stored as panels w[N / 8][K][8] (eight output columns per panel, contiguous), so a
// panel is one sequential stream. Up to six token rows stay in registers while 2-4 panels
// stream past (several streams keep the memory busy; one does not), and the next group of
// panels is prefetched, a share per pass, while the rows are multiplied. The prologue is an
// RMSNorm of x or SwiGLU of its two halves, the epilogue a bias and a residual: a transformer
// layer is four such calls and one attention call (cache_attention.cc), with nothing in
// between.
//
// Every output element is one sequential sum over k (fused multiply-adds in order k = 0..K-1)
// whatever M and however rows are grouped: a row's result does not depend on how many rows were
// scored with it, so a verification call gives the same logits as the decode steps it replaces.
//
// Portable C++ with GCC/Clang vector extensions (AVX2 + FMA when built with -march=native on
// x86-64, NEON on AArch64); threads: common.h.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "common.h"

namespace {

using namespace specjax;

constexpr int kPanel = 8;  // output columns per panel


// y[r, 8c : 8c + 8] = sum_k x[r, k] * w_c[k, 0:8] for R rows and C panels w_c (each [K][8],
// panel c at w + c * K * 8). C panels are C concurrent memory streams (one stream does not
// keep the memory busy), R x C accumulators stay in registers.
//
// `next` (or nullptr) is the next group of C panels: its lines are prefetched into L2 while
// this one computes, so the memory stays busy through the passes that re-read a group.
template <int R, int C>
void panel_block(const float* x, int64_t K, const float* w, float* y, int64_t ldy,
                 const float* next, int64_t phase, int64_t passes) {
  v8 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = v8{};
  // One 64-byte line holds two k steps; this pass prefetches every `passes`-th line of the
  // next group, from line `phase` on, so the passes over a group share its prefetches.
  int64_t fetch = next != nullptr ? 2 * phase : K;
  for (int64_t k = 0; k < K; ++k) {
    if (k == fetch) {
      // Locality 1 (x86: prefetcht2, into L2 on our EPYC; AArch64: a keep-in-L3 hint), not
      // the default into L1: L1 holds the group the passes re-read, and the next group's lines
      // evicted it (T(8) took 28 % less time with this hint).
      for (int c = 0; c < C; ++c) __builtin_prefetch(next + c * K * kPanel + k * kPanel, 0, 1);
      fetch += 2 * passes;
    }
    v8 wk[C];
    for (int c = 0; c < C; ++c) {
      wk[c] = load8(w + c * K * kPanel + k * kPanel);
      // Keep the weights in registers: otherwise GCC folds the load into each row's FMA and
      // reads every weight R times from L1 (load-bound instead of FMA-bound).
      keep_in_register(wk[c]);
    }
    for (int r = 0; r < R; ++r) {
      const v8 b = splat(x[r * K + k]);
      for (int c = 0; c < C; ++c) acc[r][c] = fma8(b, wk[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) store8(y + r * ldy + c * kPanel, acc[r][c]);
}

typedef void (*BlockFn)(const float*, int64_t, const float*, float*, int64_t, const float*,
                        int64_t, int64_t);

constexpr int kMaxRows = 6;  // token rows per pass over a panel group

// The kernel for `rows` rows and `panels` panels (R x C <= 12 accumulators).
BlockFn block_fn(int64_t rows, int panels) {
#define SPECJAX_BLOCK(R, C) \
  if (rows == R && panels == C) return panel_block<R, C>;
  SPECJAX_BLOCK(1, 4) SPECJAX_BLOCK(2, 4) SPECJAX_BLOCK(3, 4)
  SPECJAX_BLOCK(1, 3) SPECJAX_BLOCK(2, 3) SPECJAX_BLOCK(3, 3) SPECJAX_BLOCK(4, 3)
  SPECJAX_BLOCK(1, 2) SPECJAX_BLOCK(2, 2) SPECJAX_BLOCK(3, 2) SPECJAX_BLOCK(4, 2)
  SPECJAX_BLOCK(5, 2) SPECJAX_BLOCK(6, 2)
  SPECJAX_BLOCK(1, 1) SPECJAX_BLOCK(2, 1) SPECJAX_BLOCK(3, 1) SPECJAX_BLOCK(4, 1)
  SPECJAX_BLOCK(5, 1) SPECJAX_BLOCK(6, 1)
#undef SPECJAX_BLOCK
  return nullptr;
}

// Panels streamed at once for a pass of `rows` rows (measured on the 2-core EPYC: more
// streams for fewer rows, as long as the accumulators fit in registers).
int panels_for(int64_t rows) {
  static const int kPanels[kMaxRows + 1] = {1, 4, 4, 4, 3, 2, 2};
  return kPanels[rows];
}

// Panels [p0, p1) of y[M, 8P] = x[M, K] @ w[P][K][8]. Rows go in passes of at most 6, split
// evenly (9 rows: 5 + 4, not 6 + 3), over groups of C panels read together.
// Panels read together for M rows: by the largest pass.
int panels_for_rows(int64_t M) {
  const int64_t passes = (M + kMaxRows - 1) / kMaxRows;
  return panels_for((M + passes - 1) / passes);
}

void packed_panels(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t P,
                   int64_t p0, int64_t p1) {
  const int64_t N = P * kPanel;
  const int64_t passes = (M + kMaxRows - 1) / kMaxRows;
  const int group = panels_for_rows(M);
  auto sweep = [&](int64_t p, int panels) {
    const float* wp = w + p * K * kPanel;
    // The next group, prefetched a share per pass (nullptr past this thread's range): the
    // memory stays busy while a pass re-reads this group from the cache.
    const float* next = p + 2 * panels <= p1 ? wp + panels * K * kPanel : nullptr;
    for (int64_t q = 0, m = 0; q < passes; ++q) {
      const int64_t rows = (M - m) / (passes - q);
      block_fn(rows, panels)(x + m * K, K, wp, y + m * N + p * kPanel, N, next, q, passes);
      m += rows;
    }
  };
  int64_t p = p0;
  for (; p + group <= p1; p += group) sweep(p, group);
  for (; p < p1; ++p) sweep(p, 1);
}

// What is applied to x before the product (computed once per call, M x K values).
enum Prologue : int64_t { kNone = 0, kRmsNorm = 1, kSwiGlu = 2 };

// x' = x * rsqrt(mean(x^2) + eps) * scale, per row (Llama's RMSNorm).
void rms_norm_rows(const float* x, int64_t ldx, const float* scale, float eps, int64_t M,
                   int64_t K, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * ldx;
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(xr[k]) * xr[k];
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum / K) + eps);
    for (int64_t k = 0; k < K; ++k) out[m * K + k] = xr[k] * inv * scale[k];
  }
}

// x [M, 2K] = [gate | up] -> silu(gate) * up [M, K] (SwiGLU).
void swiglu_rows(const float* x, int64_t ldx, int64_t M, int64_t K, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* gate = x + m * ldx;
    const float* up = gate + K;
    float* o = out + m * K;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      const v8 g = load8(gate + k);
      store8(o + k, g / (splat(1.0f) + exp8(-g)) * load8(up + k));
    }
    for (; k < K; ++k) o[k] = gate[k] / (1.0f + std::exp(-gate[k])) * up[k];
  }
}

// y = prologue(x) @ W (+ bias) (+ residual), W packed [P][K][8]. Unused optional inputs are
// empty arrays: scale [0] without RMSNorm, bias [0], residual [0].
ffi::Error PackedMatmul(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                        ffi::Buffer<ffi::F32> scale, ffi::Buffer<ffi::F32> bias,
                        ffi::Buffer<ffi::F32> residual, ffi::ResultBuffer<ffi::F32> y,
                        int64_t prologue, float eps) {
  const auto wd = w.dimensions();
  if (wd.size() != 3 || wd[2] != kPanel) {
    return ffi::Error::InvalidArgument("packed_matmul: w must be [panels, K, 8]");
  }
  const int64_t P = wd[0], K = wd[1], N = P * kPanel;
  const auto xd = x.dimensions();
  // x's rows may be wider than what is read (a padded fused projection's output).
  const int64_t ldx = xd.size() == 2 ? xd[1] : 0;
  if (xd.size() != 2 || ldx < (prologue == kSwiGlu ? 2 * K : K)) {
    return ffi::Error::InvalidArgument("packed_matmul: x must be [M, >= K] (SwiGLU: >= 2K)");
  }
  const int64_t M = xd[0];
  if (prologue == kRmsNorm && static_cast<int64_t>(scale.element_count()) != K) {
    return ffi::Error::InvalidArgument("packed_matmul: RMSNorm needs scale [K]");
  }
  if (bias.element_count() != 0 && static_cast<int64_t>(bias.element_count()) != N) {
    return ffi::Error::InvalidArgument("packed_matmul: bias must be [8 * panels]");
  }
  if (residual.element_count() != 0 && static_cast<int64_t>(residual.element_count()) != M * N) {
    return ffi::Error::InvalidArgument("packed_matmul: residual must be [M, 8 * panels]");
  }
  if (M == 0) return ffi::Error::Success();
  const float* xp = x.typed_data();
  std::unique_ptr<float[]> staged;
  if (prologue != kNone || ldx != K) {
    staged.reset(new float[M * K]);
    if (prologue == kRmsNorm) {
      rms_norm_rows(xp, ldx, scale.typed_data(), eps, M, K, staged.get());
    } else if (prologue == kSwiGlu) {
      swiglu_rows(xp, ldx, M, K, staged.get());
    } else {
      for (int64_t m = 0; m < M; ++m) std::memcpy(staged.get() + m * K, xp + m * ldx, K * 4);
    }
    xp = staged.get();
  }
  const float* wp = w.typed_data();
  const float* bp = bias.element_count() ? bias.typed_data() : nullptr;
  const float* rp = residual.element_count() ? residual.typed_data() : nullptr;
  float* yp = y->typed_data();
  // Threads take whole groups of panels (a partial group would read with fewer streams).
  const int64_t group = panels_for_rows(M);
  const int64_t units = (P + group - 1) / group;
  parallel_for(units, 1, [&](int64_t ua, int64_t ub) {
    const int64_t a = ua * group, b = std::min<int64_t>(ub * group, P);
    packed_panels(xp, wp, yp, M, K, P, a, b);
    if (bp == nullptr && rp == nullptr) return;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = a * kPanel; n < b * kPanel; ++n) {
        float v = yp[m * N + n];
        if (bp) v += bp[n];
        if (rp) v = rp[m * N + n] + v;
        yp[m * N + n] = v;
      }
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxPackedMatmul, PackedMatmul,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // w
                                  .Arg<ffi::Buffer<ffi::F32>>()  // scale
                                  .Arg<ffi::Buffer<ffi::F32>>()  // bias
                                  .Arg<ffi::Buffer<ffi::F32>>()  // residual
                                  .Ret<ffi::Buffer<ffi::F32>>()  // y
                                  .Attr<int64_t>("prologue")
                                  .Attr<float>("eps"));
