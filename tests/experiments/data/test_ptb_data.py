"""Char-PTB loader, training streams and BPC evaluation (rtrl/tasks/ptb*.py).

Counts and vocabulary are checked on the real files (skipped when
../shared/data/ptb is absent); batching and evaluation on small hand-made
texts against plain Python loops, in float64.
"""

import math
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.online import setup as online_setup
from rtrl import cells
from rtrl.tasks import ptb
from rtrl.tasks import ptb_eval
from conftest import dataset_dir_or_skip

HAND_MADE = "a b _ c\n d _ e f _ g \n h\n "   # 4 lines in the PTB layout


def write_split(folder: pathlib.Path, split: str, text: str) -> pathlib.Path:
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / ptb.FILE_NAMES[split]
  path.write_text(text)
  return path


def test_real_files_counts_vocabulary_and_round_trip():
  folder = dataset_dir_or_skip("ptb")
  seen = set()
  for split in ptb.SPLITS:
    ids = ptb.load_split(split, str(folder))
    assert ids.shape == (ptb.NUM_SYMBOLS[split],), split
    assert ids.dtype == np.uint8
    seen |= set(np.unique(ids).tolist())
    if split == "train":
      # The 49 symbols that occur, plus end-of-line: the whole vocabulary.
      assert sorted(np.unique(ids).tolist()) == list(range(50))
      text = (folder / ptb.FILE_NAMES[split]).read_text()
      decoded = ptb.decode(ids)
      # Same symbols line by line, and encode inverts decode exactly.
      assert decoded.split("\n") == [" ".join(line.split())
                                     for line in text.split("\n")]
      np.testing.assert_array_equal(ptb.encode(decoded), ids)
  assert ptb.VOCAB_SIZE == 50 and len(seen) == 50
  assert ptb.VOCAB[ptb.EOL_ID] == "\n"


def test_encode_hand_made_text():
  ids = ptb.encode(HAND_MADE)
  symbols = "".join(ptb.VOCAB[i] for i in ids)
  assert symbols == "ab_c\nd_ef_g\nh\n\n"
  assert ptb.decode(ids) == "a b _ c\nd _ e f _ g\nh\n"


def test_streams_are_contiguous_text_with_next_symbol_targets(tmp_path):
  path = write_split(tmp_path, "train", HAND_MADE)
  text = ptb.read_file(path)
  n, batch, steps = text.size, 3, 7          # n = 15: offsets 0, 5, 10
  state = ptb.stream_init(jax.random.PRNGKey(0), n, batch)
  np.testing.assert_array_equal(state.position, [0, 5, 10])
  device_text = jnp.asarray(text)
  chunk_fn = jax.jit(ptb.stream_chunk, static_argnums=(2, 4))
  inputs, targets = [], []
  for _ in range(3):                          # 21 steps: wraps around n
    state, chunk = chunk_fn(device_text, state, steps, 0.0, 0)
    assert chunk.inputs.shape == (steps, batch, ptb.VOCAB_SIZE)
    np.testing.assert_array_equal(chunk.inputs.sum(-1), 1.0)
    np.testing.assert_array_equal(chunk.weights, 1.0)
    assert not chunk.resets.any()
    inputs.append(np.asarray(chunk.inputs.argmax(-1)))
    targets.append(np.asarray(chunk.targets))
  inputs, targets = np.concatenate(inputs), np.concatenate(targets)
  for b, offset in enumerate([0, 5, 10]):
    expected = [text[(offset + t) % n] for t in range(3 * steps)]
    expected_next = [text[(offset + t + 1) % n] for t in range(3 * steps)]
    np.testing.assert_array_equal(inputs[:, b], expected)
    np.testing.assert_array_equal(targets[:, b], expected_next)
  np.testing.assert_array_equal(state.position, [(o + 21) % n
                                                 for o in (0, 5, 10)])


def test_resets_every_period_and_with_probability():
  text = jnp.asarray(np.arange(1000) % 50, jnp.uint8)
  state = ptb.stream_init(jax.random.PRNGKey(1), 1000, 4)   # 0,250,500,750
  _, chunk = ptb.stream_chunk(text, state, 300, reset_every=100)
  positions = (np.asarray(state.position)[None] + np.arange(300)[:, None])
  np.testing.assert_array_equal(chunk.resets, positions % 100 == 0)
  p = 0.01
  state = ptb.stream_init(jax.random.PRNGKey(2), 1000, 64)
  _, chunk = ptb.stream_chunk(text, state, 1000, reset_probability=p)
  count, total = int(chunk.resets.sum()), chunk.resets.size
  # Binomial(64000, 0.01): mean 640, sd 25.2; allow 5 sd.
  assert abs(count - p * total) < 5 * math.sqrt(total * p * (1 - p))


def python_loop_bpc(cell, params, ids, batch, reset_every=0):
  """Plain loop: stream b predicts targets [b L, (b+1) L), from zero state."""
  ids = [int(i) for i in ids]
  n = len(ids)
  length = -(-n // batch)
  inputs = [ptb.EOL_ID] + ids[:-1]
  total, count = 0.0, 0
  for b in range(batch):
    state = cell.initial_state()
    for i in range(b * length, min((b + 1) * length, n)):
      if reset_every and i % reset_every == 0:
        state = cell.initial_state()
      x = jax.nn.one_hot(inputs[i], ptb.VOCAB_SIZE, dtype=jnp.float64)
      state = cell.step(params["cell"], state, x)
      logits = cell.output(state) @ params["readout"]["w"] + \
          params["readout"]["b"]
      total -= float(jax.nn.log_softmax(logits)[ids[i]]) / math.log(2.0)
      count += 1
  assert count == n
  return total / count


@pytest.mark.parametrize("batch,reset_every", [(1, 0), (3, 0), (4, 5)])
def test_bpc_equals_python_loop(x64, batch, reset_every):
  ids = ptb.encode(HAND_MADE + "a b c\nx y _ z")   # n = 23: padding for 3, 4
  cell = cells.make("rhn", 5)
  params = online_setup.init_params(cell, jax.random.PRNGKey(3),
                                    ptb.VOCAB_SIZE, ptb.VOCAB_SIZE)
  streams = ptb_eval.make_eval_streams(ids, batch, reset_every)
  assert float(streams.weights.sum()) == ids.size
  got = ptb_eval.bpc(cell, params, streams)
  want = python_loop_bpc(cell, params, ids, batch, reset_every)
  np.testing.assert_allclose(got, want, rtol=1e-12)


def test_missing_file_names_files_and_where(tmp_path):
  write_split(tmp_path, "train", HAND_MADE)
  with pytest.raises(FileNotFoundError, match=r"ptb\.char\.valid\.txt.*"
                     r"ptb\.char\.test\.txt") as info:
    ptb.load_split("train", str(tmp_path))
  assert "config.data_dir" in str(info.value)
  assert "DATA_DIR" in str(info.value)


def test_no_files_anywhere_and_no_download(tmp_path, monkeypatch):
  monkeypatch.setenv("DATA_DIR", str(tmp_path / "nothing"))
  monkeypatch.setenv("RTRL_CACHE_DIR", str(tmp_path / "cache"))
  with pytest.raises(FileNotFoundError, match="ptb.char.train.txt"):
    ptb.find_data_dir(None, allow_download=False)


def test_corrupt_file_fails_md5(tmp_path):
  folder = dataset_dir_or_skip("ptb")
  for split in ptb.SPLITS:
    shutil.copy(folder / ptb.FILE_NAMES[split], tmp_path)
  valid = tmp_path / ptb.FILE_NAMES["valid"]
  data = bytearray(valid.read_bytes())
  data[100] = ord("q") if data[100] != ord("q") else ord("z")
  valid.write_bytes(bytes(data))
  ptb.load_split("test", str(tmp_path))  # untouched split still loads
  with pytest.raises(ValueError, match=r"ptb\.char\.valid\.txt.*md5"):
    ptb.load_split("valid", str(tmp_path))
  # The same bytes load when the check is off (still valid symbols).
  assert ptb.load_split("valid", str(tmp_path), verify_md5=False).size == \
      ptb.NUM_SYMBOLS["valid"]


def test_out_of_vocabulary_symbol_names_file_line_symbol(tmp_path):
  path = write_split(tmp_path, "valid", "a b\nc D e\n")
  with pytest.raises(ValueError, match=r"ptb\.char\.valid\.txt, line 2: "
                     r"symbol 'D'"):
    ptb.read_file(path)
  with pytest.raises(ValueError, match="symbol 'ab'"):
    ptb.encode("a ab")


def test_bad_split_and_batch():
  with pytest.raises(ValueError, match="split"):
    ptb.load_split("training")
  with pytest.raises(ValueError, match="batch_size"):
    ptb_eval.make_eval_streams(np.zeros(5, np.uint8), 0)


def make_archive(path: pathlib.Path, files: dict) -> str:
  """An uncompressed tar laid out like simple-examples.tgz; a file:// URL."""
  import tarfile  # pylint: disable=g-import-not-at-top
  with tarfile.open(path, "w") as tar:
    for name, source in files.items():
      tar.add(source, arcname=f"./{ptb.ARCHIVE_DIR}/{name}")
  return path.as_uri()


def test_download_checks_md5_and_writes_nothing_on_mismatch(tmp_path):
  sources = {name: write_split(tmp_path / "src", split, HAND_MADE)
             for split, name in ptb.FILE_NAMES.items()}
  url = make_archive(tmp_path / "fake.tar", sources)
  with pytest.raises(ValueError, match=r"ptb\.char\.train\.txt.*md5"):
    ptb.download(tmp_path / "cache", url=url)
  assert not (tmp_path / "cache").exists()


def test_download_into_cache_and_found_there(tmp_path, monkeypatch):
  folder = dataset_dir_or_skip("ptb")
  url = make_archive(tmp_path / "simple-examples.tar",
                     {name: folder / name
                      for name in ptb.FILE_NAMES.values()})
  monkeypatch.setenv("RTRL_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.setenv("DATA_DIR", str(tmp_path / "nothing"))
  monkeypatch.setattr(ptb, "ARCHIVE_URL", url)
  monkeypatch.setattr(ptb.download, "__defaults__", (url,))
  found = ptb.find_data_dir(None)
  assert found == tmp_path / "cache" / "ptb"
  assert ptb.load_split("valid").size == ptb.NUM_SYMBOLS["valid"]
  # $DATA_DIR/ptb comes first when it holds the files.
  monkeypatch.setenv("DATA_DIR", str(folder.parent))
  assert ptb.find_data_dir(None) == folder
