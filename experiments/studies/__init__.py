"""Studies that train or judge runs to answer one question, each a main run
as `python -m experiments.studies.NAME` (benchmarks and tools stay in
`scripts/`):

- `compare_second_order` (with `second_order/`): Adam, Muon, every RLS
  form, the damped second-moment RLS and kfac-jax's K-FAC on the MNIST FNN
  and the small CIFAR-10 mini-VGG (docs/benchmarks/second_order.md).
- `compare_rls_second_moment`: `rls.second_moment` against the paper's RLS
  and Adam (docs/benchmarks/rls_second_moment.md).
- `rls_mechanism`: the spectrum of plain RLS's `P` on MNIST after each
  epoch (docs/results/rls_paper.md).
- `precision_bands`: the `official` presets' runs at `tensorfloat32`
  against `highest`, judged by the official OK code's logs
  (docs/benchmarks/gpu.md).
- `headline_bands`: one run of each `official` preset to the logs' length
  (`scripts/gpu_headline.sh`) against the five official logs at their
  cadence (docs/results/ok_paper.md, "The headline at its own scale").
- `rls_default_stability`: `rls.rls()`'s defaults on standard small
  problems, with and without the built-in clip
  (docs/concepts/rls_as_optax.md, "Safe defaults").
"""
