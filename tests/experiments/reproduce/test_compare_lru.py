"""The online-LRU comparison targets (`experiments/reproduce/compare_lru.py`):
every curve's config builds at both scales, the memory column counts what
each method carries, and the stack-cosine target runs end to end (shrunk)
on real char-PTB text."""

from __future__ import annotations

import json

from conftest import dataset_dir_or_skip
import pytest

from experiments import reproduce
from experiments.reproduce import common
from experiments.reproduce import compare_lru
from rtrl.tasks import copy_task

LABELS = {
  "small": [
    "LRU-32 x1 online",
    "LRU-32 x4 online",
    "8-OK RHN-64",
    "SnAp-1 RHN-64",
    "UORO RHN-64",
  ],
  "paper": ["LRU-128 x1 online", "LRU-128 x4 online"],
}


def test_training_curves_are_valid_at_both_scales(tmp_path, monkeypatch):
  built = []
  monkeypatch.setattr(
    common,
    "run_curves",
    lambda curves, out, *a, **k: built.extend(curves) or [],
  )
  monkeypatch.setattr(common, "plot_curves", lambda *a, **k: "figure.png")
  for scale in common.SCALES:
    for name in ("compare_lru_copy", "compare_lru_ptb"):
      built.clear()
      reproduce.targets()[name][1](scale, str(tmp_path))
      labels = [c.label for c in built]
      assert labels[: len(LABELS[scale])] == LABELS[scale], labels
      configs = [common.make_config(c) for c in built]
      assert [c.cell for c in configs] == ["lru"] * 2 + ["rhn"] * 4
      assert [c.num_layers for c in configs[:2]] == [1, 4]
      assert {c.head for c in configs[:2]} == {"lru_block"}
      assert [c.estimator for c in configs] == [
        "rtrl",
        "rtrl",
        "ok",
        "snap1",
        "uoro",
        "tbptt",
      ]
      for config in configs:
        assert config.num_steps % config.chunk_steps == 0
        assert config.num_seeds == (5 if scale == "paper" else 2)


def test_memory_per_example_counts_each_methods_carry():
  """An LRU layer carries λ, γ and B sensitivities (complex: 2 floats
  each), `2 m (2 + input)`; TBPTT-20 on an RHN-64 stores 20 states of 64."""
  vocab = copy_task.VOCAB_SIZE
  lru = common.make_config(
    common.Curve("x", "copy_task", dict(compare_lru.lru_fields(1, 32, 64)))
  )
  assert compare_lru.memory_per_example(lru, vocab) == 2 * 32 * (2 + vocab)
  two = common.make_config(
    common.Curve("x", "copy_task", dict(compare_lru.lru_fields(2, 32, 64)))
  )
  assert compare_lru.memory_per_example(two, vocab) == (
    2 * 32 * (2 + vocab) + 2 * 32 * (2 + 64)
  )
  tbptt = common.make_config(
    common.Curve(
      "x",
      "copy_task",
      dict(cell="rhn", hidden_size=64, estimator="tbptt", truncation=20),
    )
  )
  assert compare_lru.memory_per_example(tbptt, vocab) == 20 * 64


@pytest.mark.slow  # Default suite time; `scripts/test.sh --slow` runs it.
def test_stack_cosine_target_end_to_end(tmp_path, monkeypatch):
  """Shrunk (LRU-4, model 8, 100 training steps, depths 1 and 2): one row
  per depth and network state; one layer is exact, deeper stacks are below
  1 below the top and exact at the top."""
  # The target reads char-PTB the way a user's run does, through $DATA_DIR.
  monkeypatch.setenv("DATA_DIR", str(dataset_dir_or_skip("ptb").parent))
  monkeypatch.setattr(compare_lru, "DEPTHS", (1, 2))
  result = reproduce.targets()["compare_lru_cosine"][1](
    "small",
    str(tmp_path),
    common.Mode(
      dict(
        hidden_size=4,
        model_size=8,
        num_steps=100,
        eval_every=100,
        checkpoint_every=100,
        log_every=100,
        eval_batch_size=64,
      )
    ),
  )
  rows = json.loads(
    (tmp_path / "compare_lru_cosine" / "table.json").read_text()
  )
  assert rows == result.table and len(rows) == 2 * len(compare_lru.DEPTHS)
  for row in rows:
    top = row["layers"] - 1
    assert row[f"cos_layer_{top}"] == pytest.approx(1, abs=1e-5), row
    if row["layers"] > 1:
      assert 0.5 < row["cos_layer_0"] < 1 - 1e-6, row
