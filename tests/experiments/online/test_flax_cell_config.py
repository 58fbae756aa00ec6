"""`--config.cell=flax:nnx.GRUCell`: the online experiments build Flax's
built-in cells by name (`rtrl.cells.make`), in their exact Lemma-1 form, so
a Kronecker estimator serves them."""

from __future__ import annotations

from helpers import copy_config
import jax
import pytest

from experiments.online import setup as online_setup
from rtrl.cells import flax_forms


def test_config_names_a_flax_cell():
  config = copy_config(
    cell="flax:nnx.GRUCell", estimator="ok", rank=2, hidden_size=8
  )
  cell = online_setup.make_cell(config)
  assert isinstance(cell, flax_forms.FlaxGRUCell) and cell.hidden_size == 8
  params = online_setup.init_params(cell, jax.random.PRNGKey(0), 5, 3)
  w = params["cell"]["W"]
  assert w.shape == (5 + 8 + 1, 4 * 8)
  assert (cell.mask_gradient(w) == w).all()
  assert online_setup.make_estimator(config, cell).name == "ok"


def test_unknown_flax_cell_is_named():
  config = copy_config(cell="flax:nnx.MGUCell", estimator="rtrl")
  with pytest.raises(ValueError, match="flax:nnx.GRUCell.*flax:nnx.MGUCell"):
    online_setup.make_cell(config)
