"""Gradient quality: cosine between estimated and exact RTRL gradients.

  python -m experiments.gradient_cosine --config configs/gradient_cosine.py \
    --workdir runs/cosine_rhn32

With the weights frozen (fresh, or restored from a Copy-task or char-PTB
checkpoint), on random inputs, the Copy task or char-PTB text
(`experiments/cosine_tasks.py`), runs exact RTRL and every estimator in `config.estimators` on the same trajectory
and records, at every step and for every repetition (an independent data
stream and estimator PRNG stream), the cosine between the estimate of
`dL_t/dW` and the exact one (Benzing et al. 2019, section 4.2, Figures 3, 6,
7, 9). Steps whose exact gradient norm is below `config.min_gradient_norm` are
dropped (null in `metrics.jsonl`), as in the paper's appendix figures.

Writes into the workdir: `config.json` (the effective config), `metrics.jsonl`
(one record per step: `step`, `num_dropped`, and per estimator label
`<label>/mean_cosine`, `<label>/std_cosine`, `<label>/num_valid`),
`summary.json` (per label: `mean_cosine`, the mean over steps of the
per-step mean, plus `final_mean_cosine` and counts) and `cosine.png`.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple
import zlib

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_flags
import numpy as np

from experiments.online import cosine_tasks
from experiments.online import setup as online_setup
from experiments.loop import workdir as workdir_lib
from rtrl import estimators, online, readout

# Kept here for callers of the tool's earlier layout.
make_data = cosine_tasks.make_data
restore_params = cosine_tasks.restore_params

SUMMARY_FILE = "summary.json"
PLOT_FILE = "cosine.png"
# Paper-style legend names; ranked ones are prefixed with the rank ('8-OK').
_DISPLAY = {"rtrl": "RTRL", "uoro": "UORO", "kf": "KF-RTRL",
            "kf_avg": "KF-AVG", "kf_approx": "KF-APPROX", "ok": "OK",
            "ok_biased": "B-OK", "ktp": "KTP"}


class EstimatorSpec(NamedTuple):
  name: str          # registry name for rtrl.estimators.make
  rank: int | None   # None for estimators without a rank
  label: str         # '8-OK', 'KF-RTRL': legend and metrics key

  def hparams(self) -> dict:
    return {} if self.rank is None else {"rank": self.rank}


def parse_estimators(spec: Any) -> list[EstimatorSpec]:
  """Parses `'ok:2,ok:8,kf_avg:8,kf,uoro'` (or a list of such entries).

  Raises:
    ValueError: an empty list or entry, an unknown name, a missing, extra or
      non-positive rank, or a duplicate.
  """
  entries = spec.split(",") if isinstance(spec, str) else list(spec)
  if not entries or all(not str(e).strip() for e in entries):
    raise ValueError("config.estimators is empty; give comma-separated "
                     "'name[:rank]' entries, e.g. 'ok:2,kf_avg:8,kf'")
  known = estimators.names()
  parsed, seen = [], set()
  for entry in entries:
    text = str(entry).strip()
    name, sep, rank_text = text.partition(":")
    name = name.strip().lower()
    where = f"in config.estimators entry {text!r}"
    if not name:
      raise ValueError(f"empty estimator name {where} (entries are "
                       "'name[:rank]' separated by commas)")
    if name not in known:
      raise ValueError(f"unknown estimator {name!r} {where}; known: {known}")
    ranked = name in online_setup.RANKED_ESTIMATORS
    if ranked and not sep:
      raise ValueError(f"estimator {name!r} needs a rank {where}, e.g. "
                       f"'{name}:8'")
    if not ranked and sep:
      raise ValueError(f"estimator {name!r} takes no rank {where}; write "
                       f"'{name}'")
    rank = int(rank_text) if rank_text.strip().isdigit() else 0
    if ranked and rank < 1:
      raise ValueError(f"rank must be a positive integer {where}, got "
                       f"{rank_text.strip()!r}")
    rank = rank if ranked else None
    label = _DISPLAY[name] if rank is None else f"{rank}-{_DISPLAY[name]}"
    if label in seen:
      raise ValueError(f"duplicate estimator {label} {where}")
    seen.add(label)
    parsed.append(EstimatorSpec(name, rank, label))
  return parsed


def validate(config) -> None:
  """Checks the config's fields; raises ValueError with the field's name."""
  for field in ("num_steps", "repetitions", "chunk_steps", "vocab_size"):
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"config.{field} must be a positive integer, got "
                       f"{value!r}")
  if config.num_steps % min(config.chunk_steps, config.num_steps):
    raise ValueError(f"config.num_steps ({config.num_steps}) must be a "
                     f"multiple of config.chunk_steps ({config.chunk_steps})")
  cosine_tasks.validate_task(config)
  if not 0.0 <= config.reset_probability <= 1.0:
    raise ValueError("config.reset_probability must be in [0, 1]")
  if config.min_gradient_norm < 0:
    raise ValueError("config.min_gradient_norm must be >= 0")
  if config.checkpoint_dir and config.params_per_repetition:
    raise ValueError("config.params_per_repetition needs fresh parameters "
                     "(config.checkpoint_dir must be empty)")
  parse_estimators(config.estimators)


def resolve(config) -> tuple[ml_collections.ConfigDict, Any]:
  """The effective config (cell, size, vocab, T from a checkpoint when set)
  and the parameters (a leading repetition axis if `params_per_repetition`)."""
  config = ml_collections.ConfigDict(config.to_dict())
  validate(config)
  params_key = jax.random.PRNGKey(config.seed)
  if config.checkpoint_dir:
    params, info = restore_params(config.checkpoint_dir)
    for field in ("cell", "hidden_size"):
      if config[field] != info[field]:
        print(f"Note: config.{field}={config[field]!r} replaced by the "
              f"checkpoint's {info[field]!r}.")
      config[field] = info[field]
    # The checkpoint's readout and input weights fix the vocabulary.
    if config.task != "random" and config.task != info["task"]:
      raise ValueError(f"config.task={config.task!r}, but "
                       f"{config.checkpoint_dir} is a {info['task']} run "
                       f"(vocabulary {info['vocab_size']}); use "
                       f"config.task={info['task']!r} or 'random'")
    config.vocab_size = info["vocab_size"]
    if config.task == "copy" and config.sequence_length == 0:
      config.sequence_length = max(1, info["curriculum_length"])
    config.checkpoint_step = info["step"]
    config.checkpoint_curriculum_length = info["curriculum_length"]
    return config, params
  config.vocab_size = cosine_tasks.TASK_VOCAB.get(config.task,
                                                  config.vocab_size)
  cell = online_setup.make_cell(config)
  init = lambda k: online_setup.init_params(cell, k, config.vocab_size,
                                            config.vocab_size)
  if config.params_per_repetition:
    return config, jax.vmap(init)(
        jax.random.split(params_key, config.repetitions))
  return config, init(params_key)


def make_runner(cell, estimator, params_axis):
  """`(init, run)` for one estimator, vmapped over repetitions.

  `run(params, carry, chunk, true_grads)` is jitted and scans over the chunk;
  it returns the carry and the `(T, R)` cosines to `true_grads` `(T, R, dim)`;
  with `true_grads=None`, the `(T, R, dim)` flattened gradients instead.
  """
  state0 = cell.initial_state()

  def init(params, keys):
    return jax.vmap(lambda p, k: (estimator.init(p["cell"], state0, k), state0),
                    in_axes=(params_axis, 0))(params, keys)

  def example_step(params, carry, batch):
    tstate, state = online.where_reset(
        batch.resets, (estimator.reset(carry[0]), state0), carry)
    tstate, state = estimator.step(params["cell"])(tstate, state, batch.inputs)
    dloss_dstate = jax.grad(lambda s: readout.step_loss(
        params["readout"], cell.output(s), batch.targets, batch.weights))(state)
    return (tstate, state), estimator.gradient(params["cell"], tstate,
                                               dloss_dstate)

  @jax.jit
  def run(params, carry, chunk, true_grads=None):
    def body(carry, xs):
      batch, true = xs
      carry, grads = jax.vmap(example_step, in_axes=(params_axis, 0, 0))(
          params, carry, batch)
      flat = _flatten(grads)
      if true is None:
        return carry, flat
      denom = jnp.linalg.norm(flat, axis=1) * jnp.linalg.norm(true, axis=1)
      # A zero estimate (or zero true gradient) has cosine 0, not NaN; zero
      # true gradients are dropped by the caller anyway.
      cosine = jnp.where(denom > 0, jnp.sum(flat * true, axis=1) /
                         jnp.where(denom > 0, denom, 1.0), 0.0)
      return carry, jnp.clip(cosine, -1.0, 1.0)
    return jax.lax.scan(body, carry, (chunk, true_grads))

  return init, run


def _flatten(grads) -> jax.Array:
  """`(R, dim)`: each repetition's cell gradient as one vector."""
  leaves = jax.tree_util.tree_leaves(grads)
  return jnp.concatenate([g.reshape(g.shape[0], -1) for g in leaves], axis=1)


def compute_cosines(config, params, on_chunk=None) -> dict:
  """Runs exact RTRL and every estimator with frozen `params`.

  Args:
    config: an effective config (see `resolve`).
    params: `{'cell', 'readout'}`, with a leading repetition axis iff
      `config.params_per_repetition`.
    on_chunk: optional `callback(step, cosines, true_norms)` after each chunk,
      given that chunk's arrays (for streaming metrics and progress).

  Returns:
    `{'labels': [...], 'cosine': {label: (num_steps, R)}, 'true_norm':
    (num_steps, R)}`; cosines are NaN where the true norm is below
    `config.min_gradient_norm`.
  """
  validate(config)
  specs = parse_estimators(config.estimators)
  chunk_steps = min(config.chunk_steps, config.num_steps)
  cell = online_setup.make_cell(config)
  params_axis = 0 if config.get("params_per_repetition") else None
  base_key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 2)
  runners, carries = {}, {}
  for spec in [EstimatorSpec("rtrl", None, "_exact")] + specs:
    estimator = estimators.make(spec.name, cell, **spec.hparams())
    init, run = make_runner(cell, estimator, params_axis)
    # Keys depend on the label only, so adding an estimator to the list
    # leaves the others' streams unchanged.
    key = jax.random.fold_in(base_key, zlib.crc32(spec.label.encode()))
    carries[spec.label] = init(params, jax.random.split(key,
                                                        config.repetitions))
    runners[spec.label] = run
  data_state, next_chunk = cosine_tasks.make_data(config)
  cosines = {s.label: [] for s in specs}
  norms = []
  for start in range(0, config.num_steps, chunk_steps):
    data_state, chunk = next_chunk(data_state)
    carries["_exact"], true = runners["_exact"](params, carries["_exact"],
                                                chunk)
    true_norm = np.asarray(jnp.linalg.norm(true, axis=2))
    dropped = true_norm < config.min_gradient_norm
    norms.append(true_norm)
    chunk_cosines = {}
    for spec in specs:
      carries[spec.label], cos = runners[spec.label](
          params, carries[spec.label], chunk, true)
      cos = np.asarray(cos, np.float64)
      # NaN marks dropped points only; a non-finite cosine elsewhere is a
      # broken estimator (or true gradient) and must not pass as "dropped".
      broken = ~np.isfinite(cos) & ~dropped
      if broken.any():
        t, rep = np.argwhere(broken)[0]
        raise FloatingPointError(
            f"{spec.label}: non-finite gradient at step {start + t + 1}, "
            f"repetition {rep}")
      cos = np.where(dropped, np.nan, cos)
      cosines[spec.label].append(cos)
      chunk_cosines[spec.label] = cos
    if on_chunk is not None:
      on_chunk(start + chunk_steps, chunk_cosines, true_norm)
  return {"labels": [s.label for s in specs],
          "cosine": {k: np.concatenate(v) for k, v in cosines.items()},
          "true_norm": np.concatenate(norms)}


def step_statistics(cos: np.ndarray) -> tuple[np.ndarray, ...]:
  """Per step: mean and std over valid repetitions (NaN if none), count."""
  valid = ~np.isnan(cos)
  count = valid.sum(axis=1)
  filled = np.where(valid, cos, 0.0)
  with np.errstate(invalid="ignore", divide="ignore"):
    mean = filled.sum(axis=1) / count
    var = (np.where(valid, cos - mean[:, None], 0.0) ** 2).sum(axis=1) / count
  return mean, np.sqrt(var), count


def _or_none(x: float):
  return None if not np.isfinite(x) else float(x)


def metrics_records(first_step: int, cosines: dict) -> list[dict]:
  """One `metrics.jsonl` record per step (steps are 1-based)."""
  stats = {k: step_statistics(v) for k, v in cosines.items()}
  any_cos = next(iter(cosines.values()))
  records = []
  for i in range(any_cos.shape[0]):
    record = {"step": first_step + i,
              "num_dropped": int(np.isnan(any_cos[i]).sum())}
    for label, (mean, std, count) in stats.items():
      record[f"{label}/mean_cosine"] = _or_none(mean[i])
      record[f"{label}/std_cosine"] = _or_none(std[i])
      record[f"{label}/num_valid"] = int(count[i])
    records.append(record)
  return records


def summarize(result: dict) -> dict:
  """Per label: mean over steps (with a valid repetition) of the mean cosine,
  the mean std, the last step's mean (Figure 9 reads one step) and counts."""
  summary = {}
  for label in result["labels"]:
    mean, std, count = step_statistics(result["cosine"][label])
    kept = count > 0
    summary[label] = {
        "mean_cosine": _or_none(mean[kept].mean()) if kept.any() else None,
        "mean_std_cosine": _or_none(std[kept].mean()) if kept.any() else None,
        "final_mean_cosine": _or_none(mean[-1]),
        "num_valid_points": int(count.sum()),
        "num_dropped_points": int(count.size * result["cosine"][label].shape[1]
                                  - count.sum()),
        "num_steps_with_valid": int(kept.sum()),
    }
  return summary


def plot(result: dict, title: str, path: str) -> None:
  """Mean ± std band over repetitions per estimator vs step (Agg backend)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(8.5, 4.5))
  for label in result["labels"]:
    mean, std, _ = step_statistics(result["cosine"][label])
    steps = np.arange(1, mean.shape[0] + 1)
    # Markers keep isolated steps visible when neighbours were dropped.
    line, = ax.plot(steps, mean, label=label, linewidth=1.2, marker=".",
                    markersize=2)
    ax.fill_between(steps, mean - std, np.minimum(mean + std, 1.0),
                    color=line.get_color(), alpha=0.2, linewidth=0)
  ax.set_xlabel("step")
  ax.set_ylabel("cosine to exact RTRL gradient")
  ax.set_ylim(top=1.02)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  # Outside the axes: the bands of noisy estimators fill the whole range.
  ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def describe(config) -> str:
  task = {"copy": f"copy T={config.sequence_length}",
          "ptb": f"char-PTB {config.get('ptb_split', 'valid')} text"}.get(
              config.task, f"random inputs (vocab {config.vocab_size})")
  source = (f"checkpoint step {config.checkpoint_step}"
            if config.checkpoint_dir else "untrained")
  return (f"{config.cell.upper()}-{config.hidden_size} | {task} | {source} | "
          f"{config.repetitions} repetitions")


def run(config, workdir: str) -> dict:
  """Runs the tool into `workdir`; returns the summary."""
  config, params = resolve(config)
  workdir_lib.prepare(workdir, config)
  metrics_path = os.path.join(workdir, workdir_lib.METRICS_FILE)
  if os.path.exists(metrics_path):
    os.remove(metrics_path)  # not resumable: a rerun rewrites everything
  writer = workdir_lib.MetricsWriter(workdir)
  title = describe(config)
  print(f"Gradient cosine | {title} | {config.num_steps} steps | "
        f"{config.estimators}")
  progress = workdir_lib.Progress(config.num_steps)

  def on_chunk(step, cosines, true_norm):
    first = step - true_norm.shape[0] + 1
    for record in metrics_records(first, cosines):
      writer.write(record)
    means = {k: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
             for k, v in cosines.items()}
    progress.report(step, dropped=int(np.isnan(next(iter(cosines.values())))
                                      .sum()), **means)

  result = compute_cosines(config, params, on_chunk)
  summary = {"estimators": summarize(result), "num_steps": config.num_steps,
             "repetitions": config.repetitions,
             "min_gradient_norm": config.min_gradient_norm, "title": title}
  with open(os.path.join(workdir, SUMMARY_FILE), "w") as f:
    json.dump(summary, f, indent=2)
  plot(result, title, os.path.join(workdir, PLOT_FILE))
  for label, stats in summary["estimators"].items():
    print(f"{label:>12}: mean cosine {stats['mean_cosine']}")
  return summary
