// Two products of tall, skinny matrices, as XLA:CPU custom calls (jax.ffi).
//
//   TallGram:  x (batch..., rows, R) -> x^T x          (batch..., R, R)
//   TallMix:   x (batch..., rows, R), c (batch..., C, R) -> x c^T
//                                                      (batch..., rows, C)
//
// The r-OK step spends two passes over its tangent factors on these: the
// Gram matrix of the propagated factors and their mixing. XLA:CPU hands
// both to a general GEMM, which for an output of R x R (or an inner
// dimension of R) with R <= 16 runs at a fraction of the machine's rate.
// Here one row is one SIMD register (or two): the Gram matrix is R
// broadcast FMAs per row into R register accumulators, the mix R FMAs per
// row into one accumulator, both limited by reading the rows. The row
// blocks are spread over XLA's intra-op thread pool.
//
// Built at run time by rtrl/cpu_kernels/build.py (g++ -O3 -march=native),
// never part of a GPU or TPU program.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common.h"

namespace {

using namespace rtrl_kernels;  // NOLINT: this file's own helpers

// acc_out (R, R) += x^T x for x (rows, R), row-major.
//
// A row is loaded as whole vectors even when R is not a multiple of the
// lane count: the lanes past R hold the next row's entries, whose products
// land in accumulator lanes that are never read. (Copying R entries into a
// zeroed vector instead stalls on store forwarding: 12-wide rows ran
// slower than XLA's GEMM that way.) Only the last rows, whose whole-vector
// load would run past the block, are copied.
template <typename T, int R>
void GramRows(const T* x, int64_t rows, T* acc_out) {
  constexpr int kLanes = Lanes<T>();
  constexpr int kVecs = (R + kLanes - 1) / kLanes;
  constexpr int kOverread = kVecs * kLanes - R;
  const int64_t loadable =
      std::max<int64_t>(0, rows - (kOverread + R - 1) / R);
  Vec<T> acc[R][kVecs];
  for (int a = 0; a < R; ++a)
    for (int v = 0; v < kVecs; ++v) acc[a][v] = Vec<T>{};
  auto accumulate = [&acc](const T* src, const Vec<T>* row) {
#pragma GCC unroll 32
    for (int a = 0; a < R; ++a) {
      const T xa = src[a];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[a][v] += xa * row[v];
    }
  };
  for (int64_t m = 0; m < loadable; ++m) {
    const T* src = x + m * R;
    Vec<T> row[kVecs];
    std::memcpy(row, src, sizeof(row));   // whole vectors: one load each
    accumulate(src, row);
  }
  for (int64_t m = loadable; m < rows; ++m) {
    const T* src = x + m * R;
    Vec<T> row[kVecs];
    for (int v = 0; v < kVecs; ++v) row[v] = Vec<T>{};
    std::memcpy(row, src, R * sizeof(T));
    accumulate(src, row);
  }
  for (int a = 0; a < R; ++a) {
    T lanes[kVecs * kLanes];
    std::memcpy(lanes, acc[a], sizeof(lanes));
    for (int b = 0; b < R; ++b) acc_out[a * R + b] += lanes[b];
  }
}

// out (rows, C) = x (rows, R) c^T for c (C, R), row-major.
template <typename T, int R, int C>
void MixRows(const T* x, const T* c, int64_t rows, T* out) {
  constexpr int kVecs = (C + Lanes<T>() - 1) / Lanes<T>();
  Vec<T> c_t[R][kVecs];   // column a of c^T, zero-padded to whole vectors
  for (int a = 0; a < R; ++a) {
    T lanes[kVecs * Lanes<T>()] = {};
    for (int j = 0; j < C; ++j) lanes[j] = c[j * R + a];
    std::memcpy(c_t[a], lanes, sizeof(lanes));
  }
  for (int64_t m = 0; m < rows; ++m) {
    const T* src = x + m * R;
    Vec<T> acc[kVecs];
    for (int v = 0; v < kVecs; ++v) acc[v] = Vec<T>{};
#pragma GCC unroll 32
    for (int a = 0; a < R; ++a) {
      const T xa = src[a];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[v] += xa * c_t[a][v];
    }
    std::memcpy(out + m * C, acc, C * sizeof(T));
  }
}

// The widths compiled: R = 1..16 (the Python side checks `supported`).
#define RTRL_FOR_EACH_WIDTH(X) \
  X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) \
  X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)

template <typename T>
bool GramDispatch(const T* x, int64_t rows, int64_t r, T* out) {
  switch (r) {
#define RTRL_CASE(R) case R: GramRows<T, R>(x, rows, out); return true;
    RTRL_FOR_EACH_WIDTH(RTRL_CASE)
#undef RTRL_CASE
    default: return false;
  }
}

// C = R (the reduction to rank r) and C = R + 1 (its float64 refinement).
template <typename T>
bool MixDispatch(const T* x, const T* c, int64_t rows, int64_t r, int64_t cols,
                 T* out) {
  if (cols == r) switch (r) {
#define RTRL_CASE(R) case R: MixRows<T, R, R>(x, c, rows, out); return true;
    RTRL_FOR_EACH_WIDTH(RTRL_CASE)
#undef RTRL_CASE
    default: return false;
  }
  if (cols == r + 1) switch (r) {
#define RTRL_CASE(R) case R: MixRows<T, R, R + 1>(x, c, rows, out); return true;
    RTRL_FOR_EACH_WIDTH(RTRL_CASE)
#undef RTRL_CASE
    default: return false;
  }
  return false;
}

// Rows per task: large enough to amortise scheduling, small enough that a
// batch of one still spreads over the threads.
constexpr int64_t kRowsPerTask = 4096;

struct Shape {
  int64_t batch = 1, rows = 0, width = 0;
};

Shape TallShape(ffi::AnyBuffer x) {
  auto dims = x.dimensions();
  Shape s;
  s.width = dims[dims.size() - 1];
  s.rows = dims[dims.size() - 2];
  for (size_t i = 0; i + 2 < dims.size(); ++i) s.batch *= dims[i];
  return s;
}

template <typename T>
ffi::Error Gram(ffi::ThreadPool pool, ffi::AnyBuffer x,
                ffi::Result<ffi::AnyBuffer> out) {
  const Shape s = TallShape(x);
  const int64_t r = s.width, blocks = std::max<int64_t>(
      1, (s.rows + kRowsPerTask - 1) / kRowsPerTask);
  const T* xp = x.typed_data<T>();
  std::vector<T> partial(s.batch * blocks * r * r, T(0));
  std::atomic<bool> ok{true};
  ParallelFor(pool, s.batch * blocks, [&](int64_t task) {
    const int64_t b = task / blocks, block = task % blocks;
    const int64_t lo = s.rows * block / blocks;
    const int64_t hi = s.rows * (block + 1) / blocks;
    if (!GramDispatch<T>(xp + (b * s.rows + lo) * r, hi - lo, r,
                         partial.data() + task * r * r))
      ok = false;
  });
  if (!ok) return ffi::Error::InvalidArgument("tall_gram: width not compiled");
  // The blocks' partial sums added in a fixed order: the result does not
  // depend on the thread schedule.
  T* op = out->typed_data<T>();
  for (int64_t b = 0; b < s.batch; ++b) {
    T* dst = op + b * r * r;
    std::fill(dst, dst + r * r, T(0));
    for (int64_t block = 0; block < blocks; ++block) {
      const T* src = partial.data() + (b * blocks + block) * r * r;
      for (int64_t i = 0; i < r * r; ++i) dst[i] += src[i];
    }
  }
  return ffi::Error::Success();
}

template <typename T>
ffi::Error Mix(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer c,
               ffi::Result<ffi::AnyBuffer> out) {
  const Shape s = TallShape(x);
  auto c_dims = c.dimensions();
  const int64_t r = s.width, cols = c_dims[c_dims.size() - 2];
  const int64_t blocks = std::max<int64_t>(
      1, (s.rows + kRowsPerTask - 1) / kRowsPerTask);
  const T* xp = x.typed_data<T>();
  const T* cp = c.typed_data<T>();
  T* op = out->typed_data<T>();
  std::atomic<bool> ok{true};
  ParallelFor(pool, s.batch * blocks, [&](int64_t task) {
    const int64_t b = task / blocks, block = task % blocks;
    const int64_t lo = s.rows * block / blocks;
    const int64_t hi = s.rows * (block + 1) / blocks;
    if (!MixDispatch<T>(xp + (b * s.rows + lo) * r, cp + b * cols * r,
                        hi - lo, r, cols, op + (b * s.rows + lo) * cols))
      ok = false;
  });
  if (!ok) return ffi::Error::InvalidArgument("tall_mix: width not compiled");
  return ffi::Error::Success();
}

ffi::Error GramAny(ffi::ThreadPool pool, ffi::AnyBuffer x,
                   ffi::Result<ffi::AnyBuffer> out) {
  switch (x.element_type()) {
    case ffi::DataType::F32: return Gram<float>(pool, x, out);
    case ffi::DataType::F64: return Gram<double>(pool, x, out);
    default: return ffi::Error::InvalidArgument("tall_gram: float32 or float64");
  }
}

ffi::Error MixAny(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer c,
                  ffi::Result<ffi::AnyBuffer> out) {
  switch (x.element_type()) {
    case ffi::DataType::F32: return Mix<float>(pool, x, c, out);
    case ffi::DataType::F64: return Mix<double>(pool, x, c, out);
    default: return ffi::Error::InvalidArgument("tall_mix: float32 or float64");
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RtrlTallGram, GramAny,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RtrlTallMix, MixAny,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
