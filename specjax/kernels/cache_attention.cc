// Attention of a few new tokens over a KV cache, with RoPE and the cache write, in one call.
//
// A decode step or a verification feeds T <= 16 new tokens per row. In XLA this is a dozen
// small ops per layer (rotations, scatters into the cache, masked scores, softmax, values),
// each a separate thunk whose fixed cost dwarfs its arithmetic; here it is one call:
//
//   qkv        [B, T, >= (H + 2 KV) * D]  the fused projection of the new tokens (q | k | v)
//   positions  [B, T] int32             RoPE positions (a chain's or a token tree's depths)
//   inv_freq   [D / 2]                  RoPE inverse frequencies ([0]: no rotation)
//   cache_k/v  [B, S, KV, D]            updated in place (aliased outputs)
//   mask       [B, T, S] bool           slots each new token sees, its own slot included
//   starts     [B] int32                where row b's new tokens are written
//   -> out     [B, T, H * D], cache_k, cache_v
//
// Only slots below starts[b] + T are read (the mask shows none past them). A query that sees
// no slot gets zeros, as `blockwise_attention` does. Writes past S are dropped (the host
// checks capacity), as `write_rows` does.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common.h"

namespace {

using namespace specjax;

// x (D values) rotated in the "rotate half" convention by precomputed cos/sin [D / 2].
void rope(const float* x, int64_t d, const float* cos, const float* sin, float* out) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    out[i] = x[i] * cos[i] - x[i + half] * sin[i];
    out[i + half] = x[i + half] * cos[i] + x[i] * sin[i];
  }
}

// q . k over D values: eight lanes, then a fixed reduction (D % 8 handled after).
inline float dot(const float* q, const float* k, int64_t d) {
  v8 acc = v8{};
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) acc = fma8(load8(q + i), load8(k + i), acc);
  float tail = 0.0f;
  for (; i < d; ++i) tail = std::fma(q[i], k[i], tail);
  return (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) + tail;
}

// Softmax attention of one query head over n visible slots (n >= 1), written to out [D].
// Scores and weights go through `scores` (n + 8 floats of scratch).
void attend_head(const float* q, const float* keys, const float* values, int64_t stride,
                 const int32_t* slots, int64_t n, int64_t d, float scale, float* scores,
                 float* out) {
  float top = -INFINITY;
  if (d == 64) {
    // The common head size: q and the output accumulators stay in registers.
    v8 qv[8];
    for (int e = 0; e < 8; ++e) {
      qv[e] = load8(q + 8 * e);
      keep_in_register(qv[e]);
    }
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {  // four slots at a time: four independent chains
      v8 acc[4];
      for (int u = 0; u < 4; ++u) {
        const float* k = keys + slots[i + u] * stride;
        acc[u] = fma8(qv[0], load8(k), v8{});
        for (int e = 1; e < 8; ++e) acc[u] = fma8(qv[e], load8(k + 8 * e), acc[u]);
      }
      for (int u = 0; u < 4; ++u) {
        const v8 a = acc[u];
        scores[i + u] =
            ((((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])))) * scale;
      }
    }
    for (; i < n; ++i) scores[i] = dot(q, keys + slots[i] * stride, d) * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) scores[i] = dot(q, keys + slots[i] * stride, d) * scale;
  }
  for (int64_t i = 0; i < n; ++i) top = std::max(top, scores[i]);
  for (int64_t i = n; i < n + 8; ++i) scores[i] = -INFINITY;
  for (int64_t i = 0; i < n; i += 8) store8(scores + i, exp8(load8(scores + i) - splat(top)));
  float norm = 0.0f;
  for (int64_t i = 0; i < n; ++i) norm += scores[i];
  const float inv = 1.0f / norm;
  if (d == 64) {
    v8 acc[8];
    for (int e = 0; e < 8; ++e) acc[e] = v8{};
    for (int64_t i = 0; i < n; ++i) {
      const v8 p = splat(scores[i]);
      const float* v = values + slots[i] * stride;
      for (int e = 0; e < 8; ++e) acc[e] = fma8(p, load8(v + 8 * e), acc[e]);
    }
    for (int e = 0; e < 8; ++e) store8(out + 8 * e, acc[e] * splat(inv));
    return;
  }
  std::memset(out, 0, d * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float p = scores[i];
    const float* v = values + slots[i] * stride;
    for (int64_t e = 0; e < d; ++e) out[e] = std::fma(p, v[e], out[e]);
  }
  for (int64_t e = 0; e < d; ++e) out[e] *= inv;
}

ffi::Error CacheAttention(ffi::Buffer<ffi::F32> qkv, ffi::Buffer<ffi::S32> positions,
                          ffi::Buffer<ffi::F32> inv_freq, ffi::Buffer<ffi::F32> cache_k_in,
                          ffi::Buffer<ffi::F32> cache_v_in, ffi::Buffer<ffi::PRED> mask,
                          ffi::Buffer<ffi::S32> starts, ffi::ResultBuffer<ffi::F32> out,
                          ffi::ResultBuffer<ffi::F32> cache_k, ffi::ResultBuffer<ffi::F32> cache_v,
                          int64_t num_heads) {
  const auto cd = cache_k_in.dimensions();
  const auto qd = qkv.dimensions();
  if (cd.size() != 4 || qd.size() != 3) {
    return ffi::Error::InvalidArgument("cache_attention: bad ranks");
  }
  const int64_t B = cd[0], S = cd[1], KV = cd[2], D = cd[3], T = qd[1], H = num_heads;
  // qkv's rows may be wider than (H + 2 KV) * D (a padded fused projection's output).
  if (qd[0] != B || qd[2] < (H + 2 * KV) * D || H % KV) {
    return ffi::Error::InvalidArgument("cache_attention: qkv must be [B, T, >= (H + 2 KV) * D]");
  }
  const bool rotate = inv_freq.element_count() != 0;
  if (rotate && static_cast<int64_t>(inv_freq.element_count()) * 2 != D) {
    return ffi::Error::InvalidArgument("cache_attention: inv_freq must be [D / 2]");
  }
  float* ck = cache_k->typed_data();
  float* cv = cache_v->typed_data();
  // The outputs alias the inputs when XLA can donate them; otherwise copy first.
  if (ck != cache_k_in.typed_data()) std::memcpy(ck, cache_k_in.typed_data(), B * S * KV * D * 4);
  if (cv != cache_v_in.typed_data()) std::memcpy(cv, cache_v_in.typed_data(), B * S * KV * D * 4);
  const float* x = qkv.typed_data();
  const int32_t* pos = positions.typed_data();
  const float* freq = rotate ? inv_freq.typed_data() : nullptr;
  const bool* seen = mask.typed_data();
  const int32_t* start = starts.typed_data();
  float* o = out->typed_data();
  const int64_t width = qd[2], group = H / KV, half = D / 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  // Rotated queries [B, T, H, D]; keys (rotated) and values written into the cache.
  std::vector<float> q(B * T * H * D), cos(half), sin(half);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = x + (b * T + t) * width;
      if (rotate) {
        for (int64_t i = 0; i < half; ++i) {
          const float angle = static_cast<float>(pos[b * T + t]) * freq[i];
          cos[i] = std::cos(angle);
          sin[i] = std::sin(angle);
        }
      }
      auto place = [&](const float* src, float* dst) {
        if (rotate) {
          rope(src, D, cos.data(), sin.data(), dst);
        } else {
          std::memcpy(dst, src, D * 4);
        }
      };
      for (int64_t h = 0; h < H; ++h) place(row + h * D, q.data() + ((b * T + t) * H + h) * D);
      const int64_t slot = start[b] + t;
      if (slot < 0 || slot >= S) continue;
      for (int64_t j = 0; j < KV; ++j) {
        place(row + (H + j) * D, ck + ((b * S + slot) * KV + j) * D);
        std::memcpy(cv + ((b * S + slot) * KV + j) * D, row + (H + KV + j) * D, D * 4);
      }
    }

  // One task per (row, token, kv head): its `group` query heads.
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> scores(S + 8);
    std::vector<int32_t> slots(S);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (T * KV), t = (task / KV) % T, j = task % KV;
      const int64_t live = std::min<int64_t>(S, std::max<int64_t>(start[b] + T, 0));
      const bool* vis = seen + (b * T + t) * S;
      int64_t n = 0;  // visible slots, in order
      for (int64_t s = 0; s < live; ++s)
        if (vis[s]) slots[n++] = static_cast<int32_t>(s);
      const float* keys = ck + (b * S * KV + j) * D;    // slot s at keys + s * KV * D
      const float* values = cv + (b * S * KV + j) * D;  // likewise
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = j * group + g;
        const float* qh = q.data() + ((b * T + t) * H + h) * D;
        float* oh = o + ((b * T + t) * H + h) * D;
        if (n == 0) {
          std::memset(oh, 0, D * 4);
          continue;
        }
        attend_head(qh, keys, values, KV * D, slots.data(), n, D, scale, scores.data(), oh);
      }
    }
  };
  const int64_t tasks = B * T * KV;
  const int64_t slots_read = std::max<int64_t>(start[0] + T, 1);
  // Small calls (a decode step at short context) stay on the calling thread.
  if (tasks * group * slots_read * D < (1 << 17)) {
    work(0, tasks);
  } else {
    parallel_for(tasks, 1, work);
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxCacheAttention, CacheAttention,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // qkv
                                  .Arg<ffi::Buffer<ffi::S32>>()   // positions
                                  .Arg<ffi::Buffer<ffi::F32>>()   // inv_freq
                                  .Arg<ffi::Buffer<ffi::F32>>()   // cache_k
                                  .Arg<ffi::Buffer<ffi::F32>>()   // cache_v
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // mask
                                  .Arg<ffi::Buffer<ffi::S32>>()   // starts
                                  .Ret<ffi::Buffer<ffi::F32>>()   // out
                                  .Ret<ffi::Buffer<ffi::F32>>()   // cache_k
                                  .Ret<ffi::Buffer<ffi::F32>>()   // cache_v
                                  .Attr<int64_t>("num_heads"));
