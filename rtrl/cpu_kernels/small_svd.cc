// Batched SVD of small square matrices, as an XLA:CPU custom call (jax.ffi).
//
//   SmallSvd:  a (batch..., c, c) -> u (batch..., c, c), s (batch..., c),
//                                    vt (batch..., c, c)
//
// with a = u diag(s) vt, s non-increasing, as jnp.linalg.svd returns them.
// Every r-OK step factorises three (r+1)-square matrices per example. LAPACK
// takes each on its own, about 24 us at 17 x 17, which at n = 64 is a fifth
// of the step. Here one SIMD lane holds one matrix: a vector operation
// advances 16 (float32) or 8 (float64) matrices by the same rotation step.
//
// The method is one-sided Jacobi (Hestenes): the columns w_p, w_q of
// W = a V are rotated, in cyclic order, until every pair is orthogonal to
// within `c * eps` of their norms; then s_j = |w_j|, u_j = w_j / s_j and V
// is the product of the rotations. It is accurate to a few ulps of |a|
// (better than that for small singular values of graded matrices), and
// rank-deficient input is no special case: a zero column is never rotated
// and gives s_j = 0 with a zero u_j. A lane whose pair is already
// orthogonal takes the identity rotation (cos 1, sin 0, exact), so lanes
// converge independently; the sweeps stop when none rotated.
//
// Each matrix is scaled by a power of two (exact) so that its largest
// entry lies in [1/2, 1): the squared column norms cannot overflow or
// underflow for any finite input.
//
// The signs of the singular pairs (u_j, v_j) are fixed at the end: w . v_j
// >= 0 for a fixed weight vector w of square roots of primes. A pair whose
// columns have equal norms (every normalised Gram matrix has a unit
// diagonal) is rotated by +45 or -45 degrees as the rounding of their norm
// difference decides; the two results differ by the sign of one pair, so
// without this a one-ulp change of the input flipped u_j and v_j (LAPACK's
// signs do not jump there). The weights are independent over the
// rationals, so no exactly structured v_j (entries +-1/sqrt(2), zeros) is
// orthogonal to them.
//
// Built at run time by rtrl/cpu_kernels/build.py, with tall_skinny.cc.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "common.h"

namespace {

using namespace rtrl_kernels;  // NOLINT: this file's own helpers

constexpr int kMaxSweeps = 40;

template <typename T>
Vec<T> Broadcast(T x) {
  Vec<T> v;
  for (int l = 0; l < Lanes<T>(); ++l) v[l] = x;
  return v;
}

template <typename T>
Vec<T> Sqrt(Vec<T> x) {
  Vec<T> out;
  for (int l = 0; l < Lanes<T>(); ++l) out[l] = std::sqrt(x[l]);
  return out;
}

template <typename M>
bool AnyLane(M mask, int lanes) {
  for (int l = 0; l < lanes; ++l)
    if (mask[l]) return true;
  return false;
}

// The rounds of a round-robin tournament on 0 .. c - 1 (the circle
// method): every pair (p, q), p < q, once per sweep, and the pairs of one
// round share no column. Their inner products, angles and rotations are
// independent, so they are computed side by side and the processor
// overlaps their latencies, which the row-cyclic order (each pair waiting
// on the previous one's rotation) does not allow.
using Rounds = std::vector<std::vector<std::pair<int64_t, int64_t>>>;

Rounds RoundRobin(int64_t c) {
  const int64_t players = c + (c % 2);   // an odd c sits one out per round
  Rounds rounds;
  for (int64_t round = 0; round + 1 < players; ++round) {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (int64_t k = 0; k < players / 2; ++k) {
      const int64_t p = k == 0 ? players - 1 : (round + k) % (players - 1);
      const int64_t q = (round - k + players - 1) % (players - 1);
      if (p >= c || q >= c) continue;
      pairs.emplace_back(std::min(p, q), std::max(p, q));
    }
    rounds.push_back(pairs);
  }
  return rounds;
}

// sqrt(2), sqrt(3), sqrt(5), ...: c weights, one per row of V, for the
// sign convention (the square roots of distinct primes are linearly
// independent over the rationals).
template <typename T>
std::vector<T> SignWeights(int64_t c) {
  std::vector<T> weights;
  for (int64_t candidate = 2; static_cast<int64_t>(weights.size()) < c;
       ++candidate) {
    bool prime = true;
    for (int64_t d = 2; d * d <= candidate && prime; ++d)
      prime = candidate % d != 0;
    if (prime) weights.push_back(std::sqrt(static_cast<T>(candidate)));
  }
  return weights;
}

// Factorises the matrices first .. first + count - 1 (count <= lanes) of
// `a` into `u`, `s`, `vt`. w and v are scratch of c * c vectors each,
// column-major: w[j * c + i] is row i of column j, one matrix per lane.
template <typename T>
void SvdLanes(const T* a, int64_t first, int64_t count, int64_t c,
              const Rounds& rounds, const T* sign_weights, T* u, T* s,
              T* vt, Vec<T>* w, Vec<T>* v) {
  constexpr int kLanes = Lanes<T>();
  const Vec<T> zero = Broadcast<T>(0), one = Broadcast<T>(1);
  T scale[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    T largest = 0;
    if (l < count) {
      const T* matrix = a + (first + l) * c * c;
      for (int64_t k = 0; k < c * c; ++k)
        largest = std::max(largest, std::abs(matrix[k]));
    }
    int exponent = 0;
    if (largest > 0 && std::isfinite(largest)) std::frexp(largest, &exponent);
    scale[l] = std::ldexp(T(1), -exponent);
  }
  for (int64_t j = 0; j < c; ++j)
    for (int64_t i = 0; i < c; ++i) {
      Vec<T> column_entry = zero;
      for (int l = 0; l < count; ++l)
        column_entry[l] = a[(first + l) * c * c + i * c + j] * scale[l];
      w[j * c + i] = column_entry;
      v[j * c + i] = i == j ? one : zero;
    }

  const Vec<T> tolerance =
      Broadcast<T>(T(c) * std::numeric_limits<T>::epsilon());
  const int64_t max_pairs = c / 2;
  std::vector<Vec<T>> squared_norm(c), gamma(max_pairs), cosine(max_pairs),
      sine(max_pairs);
  std::vector<char> any_lane(max_pairs);
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    // Recomputed each sweep; within it, updated by the rotations.
    for (int64_t j = 0; j < c; ++j) {
      Vec<T> sum = zero;
      for (int64_t i = 0; i < c; ++i) sum += w[j * c + i] * w[j * c + i];
      squared_norm[j] = sum;
    }
    bool rotated = false;
    for (const auto& pairs : rounds) {
      const int64_t num_pairs = pairs.size();
      for (int64_t k = 0; k < num_pairs; ++k) gamma[k] = zero;
      for (int64_t i = 0; i < c; ++i)
        for (int64_t k = 0; k < num_pairs; ++k)
          gamma[k] += w[pairs[k].first * c + i] * w[pairs[k].second * c + i];
      for (int64_t k = 0; k < num_pairs; ++k) {
        const auto [p, q] = pairs[k];
        const Vec<T> alpha = squared_norm[p], beta = squared_norm[q];
        const Vec<T> g = gamma[k];
        const Vec<T> abs_gamma = g < 0 ? -g : g;
        const auto rotate = abs_gamma > tolerance * Sqrt<T>(alpha * beta);
        any_lane[k] = AnyLane(rotate, kLanes);
        // tan of the angle that zeroes gamma, the smaller root (|t| <= 1);
        // 1 + zeta^2 is formed as zeta^2 (1 + 1 / zeta^2) when |zeta| > 1
        // so that it cannot overflow.
        const Vec<T> zeta = (beta - alpha) / (2 * (rotate ? g : one));
        const Vec<T> abs_zeta = zeta < 0 ? -zeta : zeta;
        const auto large = abs_zeta > one;
        const Vec<T> inverse = one / (large ? abs_zeta : one);
        const Vec<T> root = large ? abs_zeta * Sqrt<T>(one + inverse * inverse)
                                  : Sqrt<T>(one + abs_zeta * abs_zeta);
        Vec<T> t = one / (abs_zeta + root);
        t = zeta < 0 ? -t : t;
        t = rotate ? t : zero;
        cosine[k] = one / Sqrt<T>(one + t * t);
        sine[k] = cosine[k] * t;
        squared_norm[p] = alpha - t * g;
        squared_norm[q] = beta + t * g;
      }
      for (int64_t k = 0; k < num_pairs; ++k) {
        if (!any_lane[k]) continue;
        rotated = true;
        const auto [p, q] = pairs[k];
        const Vec<T> cs = cosine[k], sn = sine[k];
        for (Vec<T>* m : {w, v}) {
          Vec<T>* mp = m + p * c;
          Vec<T>* mq = m + q * c;
          for (int64_t i = 0; i < c; ++i) {
            const Vec<T> xp = mp[i], xq = mq[i];
            mp[i] = cs * xp - sn * xq;
            mq[i] = sn * xp + cs * xq;
          }
        }
      }
    }
    if (!rotated) break;
  }

  std::vector<Vec<T>> norms(c), weighted(c);
  for (int64_t j = 0; j < c; ++j) {
    Vec<T> sum = zero, dot = zero;
    for (int64_t i = 0; i < c; ++i) {
      sum += w[j * c + i] * w[j * c + i];
      dot += sign_weights[i] * v[j * c + i];
    }
    norms[j] = Sqrt<T>(sum);
    weighted[j] = dot;
  }
  std::vector<int64_t> order(c);
  for (int l = 0; l < count; ++l) {
    // Non-increasing singular values; a stable sort keeps ties in column
    // order. NaN (from non-finite input) sorts first, so that the order
    // stays a strict weak one.
    for (int64_t j = 0; j < c; ++j) order[j] = j;
    auto key = [&](int64_t j) {
      const T norm = norms[j][l];
      return std::isnan(norm) ? std::numeric_limits<T>::infinity() : norm;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return key(x) > key(y); });
    const int64_t b = first + l;
    for (int64_t k = 0; k < c; ++k) {
      const int64_t j = order[k];
      const T norm = norms[j][l];
      s[b * c + k] = norm / scale[l];
      const T sign = weighted[j][l] < 0 ? T(-1) : T(1);
      const T inverse = norm > 0 ? sign / norm : T(0);
      for (int64_t i = 0; i < c; ++i) {
        u[(b * c + i) * c + k] = w[j * c + i][l] * inverse;
        vt[(b * c + k) * c + i] = sign * v[j * c + i][l];
      }
    }
  }
}

template <typename T>
ffi::Error Svd(ffi::ThreadPool pool, ffi::AnyBuffer a,
               ffi::Result<ffi::AnyBuffer> u, ffi::Result<ffi::AnyBuffer> s,
               ffi::Result<ffi::AnyBuffer> vt) {
  auto dims = a.dimensions();
  if (dims.size() < 2 || dims[dims.size() - 1] != dims[dims.size() - 2])
    return ffi::Error::InvalidArgument("small_svd: (..., c, c) input");
  const int64_t c = dims[dims.size() - 1];
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < dims.size(); ++i) batch *= dims[i];
  if (batch == 0 || c == 0) return ffi::Error::Success();
  constexpr int kLanes = Lanes<T>();
  const int64_t groups = (batch + kLanes - 1) / kLanes;
  const T* ap = a.typed_data<T>();
  T* up = u->typed_data<T>();
  T* sp = s->typed_data<T>();
  T* vtp = vt->typed_data<T>();
  const Rounds rounds = RoundRobin(c);
  const std::vector<T> sign_weights = SignWeights<T>(c);
  ParallelFor(pool, groups, [&](int64_t group) {
    std::vector<Vec<T>> w(c * c), v(c * c);
    const int64_t first = group * kLanes;
    SvdLanes<T>(ap, first, std::min<int64_t>(kLanes, batch - first), c,
                rounds, sign_weights.data(), up, sp, vtp, w.data(),
                v.data());
  });
  return ffi::Error::Success();
}

ffi::Error SvdAny(ffi::ThreadPool pool, ffi::AnyBuffer a,
                  ffi::Result<ffi::AnyBuffer> u,
                  ffi::Result<ffi::AnyBuffer> s,
                  ffi::Result<ffi::AnyBuffer> vt) {
  switch (a.element_type()) {
    case ffi::DataType::F32: return Svd<float>(pool, a, u, s, vt);
    case ffi::DataType::F64: return Svd<double>(pool, a, u, s, vt);
    default: return ffi::Error::InvalidArgument("small_svd: float32 or float64");
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RtrlSmallSvd, SvdAny,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
