// Shared by specjax's CPU kernels: 8-float vectors and a pool-friendly parallel loop.
#ifndef SPECJAX_KERNELS_COMMON_H_
#define SPECJAX_KERNELS_COMMON_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#if defined(__FMA__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "xla/ffi/api/ffi.h"

namespace specjax {

namespace ffi = xla::ffi;

typedef float v8 __attribute__((vector_size(32)));

inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof(v)); }

inline v8 splat(float s) { return v8{s, s, s, s, s, s, s, s}; }

// exp of eight floats: 2^n * p(r) with Cephes' degree-6 polynomial on |r| <= ln(2) / 2, within
// about 1 ulp of expf (measured over [-86, 0]); 0 below -87, +inf above 88.7.
inline v8 exp8(v8 x) {
  const v8 lo = splat(-87.0f), hi = splat(88.7f);
  const v8 c = x < lo ? lo : (x > hi ? hi : x);
  // Round to nearest by adding and subtracting 1.5 * 2^23 (|c * log2(e)| < 2^22 here).
  const v8 shift = splat(12582912.0f);
  const v8 n = (c * splat(1.44269504088896341f) + shift) - shift;
  v8 r = c - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  v8 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * r * r + r + splat(1.0f);
  typedef int32_t i8 __attribute__((vector_size(32)));
  const i8 bits = (__builtin_convertvector(n, i8) + 127) << 23;
  v8 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const v8 out = p * scale;
  return x < lo ? v8{} : (x > hi ? splat(__builtin_inff()) : out);
}

// a * b + c rounded once (a fused multiply-add), spelled out: the kernels are built with
// -ffp-contract=off, so this is the only place products and sums fuse, and every output is the
// same sequence of operations whatever code path (rows, panels) computed it.
inline v8 fma8(v8 a, v8 b, v8 c) {
#if defined(__FMA__)
  return reinterpret_cast<v8>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a),
                                              reinterpret_cast<__m256>(b),
                                              reinterpret_cast<__m256>(c)));
#elif defined(__aarch64__)
  float32x4_t lo, hi, al, ah, bl, bh, cl, ch;
  std::memcpy(&al, &a, 16), std::memcpy(&ah, reinterpret_cast<char*>(&a) + 16, 16);
  std::memcpy(&bl, &b, 16), std::memcpy(&bh, reinterpret_cast<char*>(&b) + 16, 16);
  std::memcpy(&cl, &c, 16), std::memcpy(&ch, reinterpret_cast<char*>(&c) + 16, 16);
  lo = vfmaq_f32(cl, al, bl);
  hi = vfmaq_f32(ch, ah, bh);
  v8 out;
  std::memcpy(&out, &lo, 16), std::memcpy(reinterpret_cast<char*>(&out) + 16, &hi, 16);
  return out;
#else
  return a * b + c;  // no fused multiply-add on this target: two roundings, everywhere alike
#endif
}

// An empty asm that claims to change v: the compiler must hold it in a register here.
inline void keep_in_register(v8& v) {
#if defined(__x86_64__)
  asm("" : "+x"(v));
#elif defined(__aarch64__)
  asm("" : "+w"(v));
#endif
}

// The kernels' own worker threads (cores - 1 of them). A call splits its work into chunks that
// the calling thread and the workers claim from a shared counter. Workers spin for a while
// after their last chunk before they sleep: a decoding step makes ~150 calls back to back, and
// waking a sleeping thread costs more than most of those calls (XLA's intra-op pool, which the
// kernels used first, woke its threads per call). A caller that finds the workers busy with
// another call (XLA may run two custom calls at once) works alone, so nothing waits on a pool.
class Workers {
 public:
  static Workers& get() {
    static Workers* workers = new Workers();  // never destroyed: its threads are detached
    return *workers;
  }

  int64_t threads() const { return static_cast<int64_t>(threads_.size()) + 1; }

  // Runs fn(i) for i in [0, count) on the caller and the workers; returns when all are done.
  template <typename F>
  void run(int64_t count, const F& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock() || threads_.empty() || count <= 1) {
      for (int64_t i = 0; i < count; ++i) fn(i);
      return;
    }
    auto job = std::make_shared<Job>();
    job->count = count;
    job->fn = &fn;
    job->call = [](const void* f, int64_t i) { (*static_cast<const F*>(f))(i); };
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    job->claim();
    while (job->done.load(std::memory_order_acquire) < count) cpu_relax();
    // A worker still holding `job` finds every chunk claimed and never calls `fn` again.
  }

 private:
  struct Job {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    int64_t count = 0;
    const void* fn = nullptr;
    void (*call)(const void*, int64_t) = nullptr;

    void claim() {
      for (;;) {
        const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
        if (i >= count) return;
        call(fn, i);
        done.fetch_add(1, std::memory_order_release);
      }
    }
  };

  Workers() {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const unsigned extra = std::min(cores, 16u) - 1;
    for (unsigned i = 0; i < extra; ++i) threads_.emplace_back([this] { loop(); });
    for (auto& t : threads_) t.detach();
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin for the next call (about 100 microseconds), then sleep until one comes.
      for (int spin = 0; spin < 4000; ++spin) {
        if (generation_.load(std::memory_order_acquire) != seen) break;
        cpu_relax();
      }
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_acquire);
        job = current_;
      }
      job->claim();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex busy_;  // one call at a time uses the workers
  std::mutex mu_;    // guards current_ (generation_ changes under it)
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::shared_ptr<Job> current_;
};

// Runs fn(begin, end) over [0, total) in chunks of at least `grain`, on the kernels' workers.
template <typename F>
inline void parallel_for(int64_t total, int64_t grain, const F& fn) {
  Workers& workers = Workers::get();
  const int64_t threads = workers.threads();
  const int64_t count = std::min<int64_t>(threads * 4, std::max<int64_t>(total / grain, 1));
  if (threads == 1 || count == 1) {
    fn(0, total);
    return;
  }
  workers.run(count, [&](int64_t i) { fn(total * i / count, total * (i + 1) / count); });
}

}  // namespace specjax

#endif  // SPECJAX_KERNELS_COMMON_H_
