// Threefry-2x32 with 20 rounds (Salmon et al., SC 2011), the hash behind jax.random, as one call.
//
// XLA:CPU's own lowering of the hash is a rolled loop of 5 x 4 rounds of adds, rotations and
// xors: in a decoding program that draws a dozen times per iteration, each draw becomes a
// while loop with its own thunks, and the many small fusions dominate compile time. Here it is
// one FFI call per draw, computing the same 32-bit words:
//
//   key0, key1, x0, x1   uint32, one shape (the lowering broadcasts them)
//   -> y0, y1            uint32, that shape
//
// Key schedule and round constants are those of the reference (Random123's threefry2x32_20):
// ks2 = key0 ^ key1 ^ 0x1BD11BDA, rotations (13, 15, 26, 6) and (17, 29, 16, 24) alternating
// every four rounds, a key injection (plus its index) after each group of four.

#include <cstdint>

#include "common.h"

namespace {

using namespace specjax;

inline uint32_t rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

// Four rounds of the mix with rotations r0..r3.
#define SPECJAX_FOUR_ROUNDS(a, b, r0, r1, r2, r3) \
  a += b, b = rotl(b, r0), b ^= a;                \
  a += b, b = rotl(b, r1), b ^= a;                \
  a += b, b = rotl(b, r2), b ^= a;                \
  a += b, b = rotl(b, r3), b ^= a

void hash_range(const uint32_t* k0, const uint32_t* k1, const uint32_t* x0, const uint32_t* x1,
                uint32_t* y0, uint32_t* y1, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t ks0 = k0[i], ks1 = k1[i], ks2 = ks0 ^ ks1 ^ 0x1BD11BDAu;
    uint32_t a = x0[i] + ks0, b = x1[i] + ks1;
    SPECJAX_FOUR_ROUNDS(a, b, 13, 15, 26, 6);
    a += ks1, b += ks2 + 1u;
    SPECJAX_FOUR_ROUNDS(a, b, 17, 29, 16, 24);
    a += ks2, b += ks0 + 2u;
    SPECJAX_FOUR_ROUNDS(a, b, 13, 15, 26, 6);
    a += ks0, b += ks1 + 3u;
    SPECJAX_FOUR_ROUNDS(a, b, 17, 29, 16, 24);
    a += ks1, b += ks2 + 4u;
    SPECJAX_FOUR_ROUNDS(a, b, 13, 15, 26, 6);
    a += ks2, b += ks0 + 5u;
    y0[i] = a, y1[i] = b;
  }
}

#undef SPECJAX_FOUR_ROUNDS

// Below this many words one thread is faster than waking the workers (about 1 ns per word).
constexpr int64_t kParallelGrain = 1 << 17;

ffi::Error Threefry2x32(ffi::Buffer<ffi::U32> key0, ffi::Buffer<ffi::U32> key1,
                        ffi::Buffer<ffi::U32> x0, ffi::Buffer<ffi::U32> x1,
                        ffi::ResultBuffer<ffi::U32> y0, ffi::ResultBuffer<ffi::U32> y1) {
  const int64_t n = y0->element_count();
  if (key0.element_count() != n || key1.element_count() != n || x0.element_count() != n ||
      x1.element_count() != n || y1->element_count() != n) {
    return ffi::Error::InvalidArgument("threefry2x32: every operand must have the same size");
  }
  const uint32_t *a = key0.typed_data(), *b = key1.typed_data();
  const uint32_t *c = x0.typed_data(), *d = x1.typed_data();
  uint32_t *out0 = y0->typed_data(), *out1 = y1->typed_data();
  if (n < 2 * kParallelGrain) {
    hash_range(a, b, c, d, out0, out1, 0, n);
  } else {
    parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
      hash_range(a, b, c, d, out0, out1, begin, end);
    });
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxThreefry2x32, Threefry2x32,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U32>>()  // key0
                                  .Arg<ffi::Buffer<ffi::U32>>()  // key1
                                  .Arg<ffi::Buffer<ffi::U32>>()  // x0
                                  .Arg<ffi::Buffer<ffi::U32>>()  // x1
                                  .Ret<ffi::Buffer<ffi::U32>>()  // y0
                                  .Ret<ffi::Buffer<ffi::U32>>());  // y1
