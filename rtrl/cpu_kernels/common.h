// What the CPU kernels share: GCC vector types of one AVX-512 register and
// a parallel loop on XLA's intra-op thread pool.

#ifndef RTRL_CPU_KERNELS_COMMON_H_
#define RTRL_CPU_KERNELS_COMMON_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace rtrl_kernels {

namespace ffi = xla::ffi;

// One AVX-512 register. Where the machine's registers are narrower (AVX2,
// NEON), GCC splits each vector operation into two or four.
constexpr int kVectorBytes = 64;

// GCC's vector extension (an attribute on a template alias is ignored, so
// one typedef per element type).
template <typename T> struct VecOf;
template <> struct VecOf<float> {
  typedef float type __attribute__((vector_size(kVectorBytes)));
};
template <> struct VecOf<double> {
  typedef double type __attribute__((vector_size(kVectorBytes)));
};
template <typename T>
using Vec = typename VecOf<T>::type;

template <typename T>
constexpr int Lanes() { return kVectorBytes / sizeof(T); }

// Runs body(task) for every task in [0, tasks), on the calling thread and
// whichever of the intra-op pool's threads pick up a helper, and returns
// when all are done. The caller waits only for tasks a helper has already
// claimed, never for a helper to start: two of these calls running at once
// on a pool whose threads are all busy still finish. A helper that starts
// late finds no task left and touches only the shared counters.
template <typename F>
void ParallelFor(ffi::ThreadPool& pool, int64_t tasks, F body) {
  const int64_t helpers = std::min<int64_t>(tasks, pool.num_threads()) - 1;
  if (helpers <= 0) {
    for (int64_t t = 0; t < tasks; ++t) body(t);
    return;
  }
  struct Counters {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> completed{0};
  };
  auto counters = std::make_shared<Counters>();
  auto run = [counters, tasks, &body]() {
    for (int64_t t; (t = counters->next.fetch_add(1)) < tasks;) {
      body(t);
      counters->completed.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule([run]() { run(); });
  run();
  while (counters->completed.load(std::memory_order_acquire) < tasks)
    std::this_thread::yield();
}

}  // namespace rtrl_kernels

#endif  // RTRL_CPU_KERNELS_COMMON_H_
