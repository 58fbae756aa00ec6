"""SnAp-n at several orders against exact RTRL on a sparse cell, measured
side by side in one run (`bench_rtrl --snap_orders 1,2,3`): the kept pairs
and edges of each pattern, the tangent's floats, the time per training
step (`full`) and per tangent step alone (`core`), each over exact RTRL's,
and the code that ran (`Estimator.implementation`: `snap1`'s at order 1).
"""

from __future__ import annotations

import statistics

import jax
import optax

from experiments.online.setup import init_params
from rtrl import cells
from rtrl import estimators
from rtrl import online
from rtrl.estimators import _snap_n as snap_n
from rtrl.tasks import copy_task
from scripts.benchlib.timing import compiled
from scripts.benchlib.timing import count_floats
from scripts.benchlib.timing import fmt_count
from scripts.benchlib.timing import fmt_ms
from scripts.benchlib.timing import run_timed

VOCAB = copy_task.VOCAB_SIZE


def _entry(cell, estimator, params, chunk, batch_size):
  """The compiled `full` and `core` runs of one estimator, and its floats."""
  trainer = online.make_online_trainer(cell, estimator, optax.adam(1e-3))
  state = trainer.init(params, jax.random.PRNGKey(1), batch_size)

  def core(cell_params, tstate, cell_state, inputs):
    step = jax.vmap(estimator.step(cell_params))
    carry, _ = jax.lax.scan(
      lambda c, x: (step(*c, x), None), (tstate, cell_state), inputs
    )
    return carry

  tstate = jax.eval_shape(
    estimator.init,
    params["cell"],
    cell.initial_state(),
    jax.random.PRNGKey(0),
  )
  return {
    "full": compiled(trainer.run, state, chunk),
    "core": compiled(
      core, params["cell"], state.tstate, state.cell_state, chunk.inputs
    ),
    "mem": count_floats(tstate.tangent),
  }


def measure_size(n, args) -> dict:
  """`{label: result}` for exact RTRL and each order at hidden size `n`."""
  cell = cells.CELLS[args.cell](
    n, recurrent_density=args.density, mask_seed=args.mask_seed
  )
  params = init_params(cell, jax.random.PRNGKey(0), VOCAB, VOCAB)
  stream = copy_task.stream_init(jax.random.PRNGKey(3), args.batch_size, 16)
  chunk = copy_task.generate(stream, 10, args.steps)[1]
  entries, results = {}, {}
  methods: list[tuple[str, int | None, dict]] = [("rtrl", None, {})] + [
    (f"snap-{order}", order, {"order": order}) for order in args.snap_orders
  ]
  for tag, order, hparams in methods:
    estimator = estimators.make(tag.split("-")[0], cell, **hparams)
    entries[tag] = _entry(cell, estimator, params, chunk, args.batch_size)
    pattern = order and snap_n.snap_pattern(cell.recurrent_mask, n, order)
    results[tag] = {
      "n": n,
      "params": cell.num_parameters(VOCAB),  # W's used entries: kept only
      "dense_params": cells.CELLS[args.cell](n).num_parameters(VOCAB),
      "pairs": pattern.num_pairs if pattern else n * n,
      "edges": pattern.num_edges if pattern else None,
      "code": estimator.implementation,
      "mem": entries[tag]["mem"],
      "full": [],
      "core": [],
    }
    for part in ("full", "core"):
      run_timed(entries[tag][part])  # warm-up
  for _ in range(args.repeats):  # interleaved: the same machine load
    for tag, entry in entries.items():
      for part in ("full", "core"):
        results[tag][part].append(run_timed(entry[part]) / args.steps)
  for res in results.values():
    for part in ("full", "core"):
      res[part] = {
        "min": min(res[part]),
        "median": statistics.median(res[part]),
      }
  return results


def report(all_results: dict) -> None:
  """One table per size: each order's pattern, memory and times, and their
  ratios to exact RTRL's."""
  for n, results in all_results.items():
    exact = results["rtrl"]
    print(
      f"\nn={n}: W holds {exact['params']} used parameters "
      f"({exact['dense_params']} dense)"
    )
    print(
      f"{'':<6}{'method':<8}{'pairs':>8}{'edges':>9}{'floats':>9}"
      f"{'mem/rtrl':>10}{'full ms':>9}{'/rtrl':>7}{'core ms':>9}{'/rtrl':>7}"
      "  code"
    )
    for tag, res in results.items():
      full, core = res["full"]["min"], res["core"]["min"]
      edges = "-" if res["edges"] is None else fmt_count(res["edges"])
      print(
        f"{'':<6}{tag:<8}{res['pairs']:>8}{edges:>9}"
        f"{fmt_count(res['mem']):>9}{res['mem'] / exact['mem']:>10.3f}"
        f"{fmt_ms(full):>9}{full / exact['full']['min']:>7.2f}"
        f"{fmt_ms(core):>9}{core / exact['core']['min']:>7.2f}"
        f"  {res['code']}"
      )


def measure(args) -> dict:
  """`{n: {label: result}}` over `args.sizes`, printed as it goes."""
  print(
    f"SnAp-n vs exact RTRL: cell={args.cell} density={args.density} "
    f"mask_seed={args.mask_seed} batch={args.batch_size} "
    f"steps={args.steps} repeats={args.repeats} "
    f"device={jax.devices()[0].device_kind}",
    flush=True,
  )
  all_results = {n: measure_size(n, args) for n in sorted(args.sizes)}
  report(all_results)
  return all_results


__all__ = ["measure", "measure_size", "report"]
