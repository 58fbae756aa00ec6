"""Optimal unbiased (and biased) low-rank and Kronecker-sum approximations.

This module holds the linear algebra behind r-OK, r-B-OK, KF-RTRL, UORO, KTP
and KF-RTRL-r-APPROX (Benzing et al., "Optimal Kronecker-Sum Approximation of
Real Time Recurrent Learning", ICML 2019; section and theorem numbers below
refer to that paper and its appendix):

* `optimal_diagonal_mixing`: the minimum-variance unbiased rank-`rank`
  approximator of a non-negative diagonal matrix (Theorems 6 and 7, Lemmas 5
  and 6, the heart of Algorithm 5).
* `unbiased_low_rank`: the same for any `m x n` matrix via its SVD (Theorem 2,
  Lemma 4, Algorithm 5 for general shapes).
* `biased_low_rank`: the Eckart-Young truncated SVD (Algorithm 6).
* `optimal_variance`, `optimal_diagonal_variance`: the closed-form minimum
  variance `s1**2 / k - s2` of Theorem 6.
* `kronecker_sum_reduce`: Algorithm 4, reduces an `(r+1)`-Kronecker-sum to an
  `r`-Kronecker-sum, unbiased (r-OK) or Eckart-Young optimal (r-B-OK).
* `sign_trick_mix`, `sign_trick_variance`: the KF-RTRL / UORO sign trick with
  norm balancing, and its (deterministic) squared error.

All functions are pure `jax.numpy`, have fixed output shapes, and can be
`jit`-ted and `vmap`-ped. `rank` is always a static Python int.

Conventions. A Kronecker sum `sum_i u_i (x) A_i` is handled through its
"unfolded" matrix `G = us.T @ As` (`us` stacks the vectors `u_i` as rows, `As`
the flattened matrices `A_i`). `G` is a re-arrangement of the entries of the
Kronecker sum, so Frobenius norms, expectations and variances are the same for
both. Variance always means `E ||X' - E X'||_F^2`.

Modules: `diagonal_mixing` (Theorems 6 and 7, Lemmas 5 and 6; also the Lemma-6
constructions `projection_with_diagonal_givens` / `_householder` and
`diagonal_mixing_with_signs`, the mixing at given signs), `low_rank`
(Theorem 2, Eckart-Young), `reduce` (Algorithm 4), `sign_trick`.
"""

from __future__ import annotations

from rtrl.kronecker.diagonal_mixing import optimal_diagonal_mixing
from rtrl.kronecker.diagonal_mixing import optimal_diagonal_variance
from rtrl.kronecker.low_rank import biased_low_rank
from rtrl.kronecker.low_rank import optimal_variance
from rtrl.kronecker.low_rank import unbiased_low_rank
from rtrl.kronecker.low_rank import unbiased_low_rank_with_signs
from rtrl.kronecker.reduce import Rows
from rtrl.kronecker.reduce import dense_rows
from rtrl.kronecker.reduce import kronecker_sum_reduce
from rtrl.kronecker.reduce import reduce_rows
from rtrl.kronecker.sign_trick import sign_trick_mix
from rtrl.kronecker.sign_trick import sign_trick_scales
from rtrl.kronecker.sign_trick import sign_trick_variance

__all__ = [
  "optimal_diagonal_mixing",
  "optimal_diagonal_variance",
  "unbiased_low_rank",
  "unbiased_low_rank_with_signs",
  "biased_low_rank",
  "optimal_variance",
  "kronecker_sum_reduce",
  "reduce_rows",
  "Rows",
  "dense_rows",
  "sign_trick_mix",
  "sign_trick_scales",
  "sign_trick_variance",
]
