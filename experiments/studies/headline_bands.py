"""The OK paper's headline at its own scale: one run of each `official`
preset, to the official logs' length, against the five logs' min-max.

The runs (a GPU's work, over as many device calls as it takes;
`scripts/gpu_headline.sh` runs, stops and resumes them) live where
`experiments/studies/precision_bands.py` looks for them,
`W/copy_<precision>` and `W/ptb_<precision>`:

  python -m experiments.copy_task --config configs/copy_task.py:official \
    --config.num_steps=2000000 --config.checkpoint_every=100000 \
    --workdir W/copy_highest
  DATA_DIR=../shared/data python -m experiments.ptb \
    --config configs/ptb.py:official --workdir W/ptb_highest

Then a table per task of its headline metric at the logs' own cadence
(`HEADLINES`: Copy's curriculum length T every 100,000 steps, char-PTB's
valid BPC every 10,000), ours next to the official min / mean / max at the
same step, inside the logs' range or not, inside the band widened by
`ok_official.TOLERANCE` (T +-1, BPC +-0.02), and by how much ours lies
outside the logs' range (+ above, - below); PTB's test BPC from
`summary.json` once the run has finished. Written to `DIR/headline.md`
(rows as `.json`) with a figure per task, `DIR/headline_<task>.png`:

  python -m experiments.studies.headline_bands --workdir W \
    [--precision highest] [--out DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
import json
import os
from typing import NamedTuple

from experiments.data import official_logs
from experiments.loop import workdir as workdir_lib
from experiments.reproduce import ok_official
from experiments.studies import precision_bands


class Headline(NamedTuple):
  """One task's headline: the run directory's prefix, the metric, the
  steps between compared points, the official log and the run's length
  (where its `config.json` does not say)."""

  task: str  # W/<task>_<precision>
  metric: str
  every: int
  load: Callable[[], official_logs.OfficialLog]
  num_steps: int
  label: str


HEADLINES = (
  Headline(
    "copy",
    "curriculum_length",
    100_000,
    official_logs.load_copy,
    2_000_000,
    "Copy 16-OK RHN-128 b16: curriculum length T",
  ),
  Headline(
    "ptb",
    "valid_bpc",
    10_000,
    official_logs.load_ptb,
    1_000_000,
    "char-PTB 8-OK RHN-256 b32: valid BPC",
  ),
)


def outside_by(value: float, band: tuple[float, float, float]) -> float:
  """How far `value` lies outside the band's `[min, max]`: 0 inside, the
  distance to `max` (positive) above it, to `min` (negative) below it."""
  low, _, high = band
  return value - high if value > high else value - low if value < low else 0.0


def headline_rows(
  run: precision_bands.PrecisionRun, headline: Headline, every: int = 0
) -> list[dict]:
  """At every `every` (default `headline.every`) steps the run logged its
  metric, and at its last such step, ours (the mean over its runs) against
  the official band there; steps past the official log are left out."""
  every = every or headline.every
  means = precision_bands.seed_means(run, headline.metric)
  last = max(means, default=None)
  log = headline.load()
  rows = []
  for step in sorted(s for s in means if s % every == 0 or s == last):
    band = ok_official.official_band(log, headline.metric, step)
    if band is None:
      continue
    ours = means[step]
    rows.append(
      {
        "task": headline.task,
        "metric": headline.metric,
        "step": step,
        "ours": ours,
        "official_min": band[0],
        "official_mean": band[1],
        "official_max": band[2],
        "inside_logs": outside_by(ours, band) == 0.0,
        "inside": ok_official.inside_band(headline.metric, step, ours, band),
        "tolerance": ok_official.TOLERANCE.get(headline.metric),
        "outside_by": outside_by(ours, band),
      }
    )
  return rows


def read_json(path: str, name: str) -> dict:
  """The run directory's `name` (`config.json`; `summary.json`, written
  when the run finished), else {}."""
  if not os.path.exists(os.path.join(path, name)):
    return {}
  with open(os.path.join(path, name)) as f:
    return json.load(f)


def _verdict(value) -> str:
  return {True: "yes", False: "**no**", None: "-"}[value]


def markdown_section(
  headline: Headline,
  rows: Sequence[dict],
  reached: tuple[int, int],
  summary: dict,
) -> list[str]:
  """One task's table, its last point in a sentence and, when the run has
  finished, its summary (PTB: the test BPC); `reached`: (step, of steps)."""
  lines = [
    f"## {headline.label} (`{headline.metric}`)",
    "",
    f"Last record at step {reached[0]:,} of {reached[1]:,}.",
    "",
    "| step | ours | official min | official mean | official max"
    " | inside the logs | inside +-tolerance | outside by |",
    "|" + "---|" * 8,
  ]
  for r in rows:
    lines.append(
      f"| {r['step']:,} | {r['ours']:.4g} | {r['official_min']:.4g} | "
      f"{r['official_mean']:.4g} | {r['official_max']:.4g} | "
      f"{_verdict(r['inside_logs'])} | {_verdict(r['inside'])} | "
      f"{r['outside_by']:+.4g} |"
    )
  if rows:
    r = rows[-1]
    where = (
      "inside the logs' range"
      if r["inside_logs"]
      else f"outside the logs' range by {r['outside_by']:+.4g}"
    )
    judged = sum(x["inside"] is not None for x in rows)
    inside = sum(bool(x["inside"]) for x in rows)
    lines += [
      "",
      f"At step {r['step']:,}: ours {r['ours']:.4g}, official "
      f"{r['official_min']:.4g}-{r['official_max']:.4g}: {where}. Inside "
      f"+-{r['tolerance']:g} at {inside} of {judged} judged steps.",
    ]
  if summary:
    fields = ", ".join(f"{k} {v}" for k, v in sorted(summary.items()))
    lines += ["", f"Finished: {fields}."]
  return lines


def plot(
  run: precision_bands.PrecisionRun,
  headline: Headline,
  rows: Sequence[dict],
  path: str,
) -> str:
  """The run's metric at every logged step over the five logs (grey band
  and lines), the compared steps marked."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  steps, _, means = precision_bands.seed_series(run, headline.metric)
  fig, ax = plt.subplots(figsize=(7, 4))
  last = int(steps.max()) if steps.size else headline.every
  ok_official.draw_official_band(ax, headline.load(), headline.metric, last)
  ax.plot(steps, means, color="tab:blue", lw=1.2, label="ours, one seed")
  ax.plot(
    [r["step"] for r in rows],
    [r["ours"] for r in rows],
    "o",
    color="tab:blue",
    ms=3,
    label=f"compared (every {headline.every:,} steps)",
  )
  ax.set(xlabel="training steps", ylabel=headline.metric)
  ax.set_title(headline.label, fontsize="medium")
  ax.legend(fontsize="small")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def compare(workdir: str, precision: str, out: str) -> list[str]:
  """Reads each task's run under `workdir` that exists, prints and writes
  the tables and figures; returns the files written.

  Raises:
    ValueError: `workdir` holds neither `copy_<precision>` nor
      `ptb_<precision>`, or one holds no records.
  """
  paths = {h: os.path.join(workdir, f"{h.task}_{precision}") for h in HEADLINES}
  found = [h for h in HEADLINES if os.path.isdir(paths[h])]
  if not found:
    raise ValueError(
      f"workdir {workdir!r} holds none of "
      f"{[os.path.basename(p) for p in paths.values()]}"
    )
  os.makedirs(out, exist_ok=True)
  lines = [f"# The OK paper's headline at its own scale (`{precision}`)"]
  all_rows, files = [], []
  for headline in found:
    run = precision_bands.read_run(paths[headline], precision)
    rows = headline_rows(run, headline)
    saved = read_json(paths[headline], workdir_lib.CONFIG_FILE)  # a dict
    reached = (
      max(r["step"] for r in run.records),
      saved.get("num_steps", headline.num_steps),
    )
    summary = read_json(paths[headline], workdir_lib.SUMMARY_FILE)
    lines += ["", *markdown_section(headline, rows, reached, summary)]
    all_rows += rows
    png = os.path.join(out, f"headline_{headline.task}.png")
    files.append(plot(run, headline, rows, png))
  text = "\n".join(lines) + "\n"
  print(text, end="", flush=True)
  stem = os.path.join(out, "headline")
  with open(stem + ".md", "w") as f:
    f.write(text)
  with open(stem + ".json", "w") as f:
    json.dump(all_rows, f, indent=2)
  return [stem + ".md", stem + ".json", *files]


def main(argv: Sequence[str] | None = None) -> list[str]:
  """The command line (see the module docstring); returns the files
  written. A workdir without runs is one line on stderr and exit status 2."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument(
    "--precision",
    default="highest",
    choices=precision_bands.PRECISIONS,
    help="the runs' matmul_precision (their folders' suffix)",
  )
  parser.add_argument("--out", default=None, help="default: --workdir")
  args = parser.parse_args(argv)
  try:
    return compare(args.workdir, args.precision, args.out or args.workdir)
  except ValueError as e:  # No runs, or one without records: say which.
    parser.exit(2, f"error: {e}\n")


if __name__ == "__main__":
  main()
