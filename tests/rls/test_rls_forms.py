"""The three RLS forms as peer transforms: their factories, state types, the
`scale_by_rls` options that dispatch to them, and optax composition."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rls
from rls import second_moment

FORMS = {
  "conventional": (rls.scale_by_rls_conventional, rls.ScaleByRLSState),
  "square_root": (rls.scale_by_rls_square_root, rls.ScaleByRLSSquareRootState),
  "second_moment": (
    rls.scale_by_rls_second_moment,
    rls.ScaleByRLSSecondMomentState,
  ),
}


def _problem(dtype, num_steps=6, seed=0):
  rng = np.random.default_rng(seed)
  params = {
    "Dense_0": {
      "kernel": jnp.asarray(rng.normal(size=(4, 3)), dtype),
      "bias": jnp.zeros(3, dtype),
    },
    "Dense_1": {"kernel": jnp.asarray(rng.normal(size=(3, 2)), dtype)},
  }
  stream = []
  for _ in range(num_steps):
    rows = {
      "Dense_0": jnp.asarray(rng.normal(size=(1, 4)) + 0.5, dtype),
      "Dense_1": jnp.asarray(rng.normal(size=(1, 3)), dtype),
    }
    grads = jax.tree.map(
      lambda p: jnp.asarray(rng.normal(size=p.shape), dtype), params
    )
    stream.append((grads, rows))
  return params, stream


def _layer_inputs(rows, form):
  """One sampled row per layer; its mean for the mean-based forms."""
  if form == "second_moment":
    return rows
  return {name: r[0] for name, r in rows.items()}


def _run(tx, params, stream, form):
  state = tx.init(params)
  directions = []
  for grads, rows in stream:
    update, state = tx.update(
      grads, state, params, layer_inputs=_layer_inputs(rows, form)
    )
    directions.append(update)
  return directions, state


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_has_its_own_state_type(form):
  factory, state_type = FORMS[form]
  params, _ = _problem(jnp.float32)
  state = factory().init(params)
  assert type(state) is state_type
  p = rls.inverse_correlation(state)
  assert set(p) == {"Dense_0", "Dense_1"}
  assert p["Dense_0"].shape == (5, 5) and p["Dense_1"].shape == (3, 3)


def test_forms_agree_in_float64(x64):
  """With one sampled row (S = 1, ratio k) the three forms run the same
  recursion: directions and P equal to float64 rounding."""
  params, stream = _problem(jnp.float64)
  hyper = dict(forgetting_factor=0.98, ratio=0.3, init_scale=2.0)
  runs = {
    form: _run(factory(**hyper), params, stream, form)
    for form, (factory, _) in FORMS.items()
  }
  want_directions, want_state = runs["conventional"]
  for form in ("square_root", "second_moment"):
    directions, state = runs[form]
    for got, want in zip(directions, want_directions):
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    for a, b in zip(
      jax.tree.leaves(rls.inverse_correlation(state)),
      jax.tree.leaves(want_state.inverse_correlation),
    ):
      np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize(
  "options,state_type",
  [
    (dict(square_root=False), rls.ScaleByRLSState),
    (dict(square_root=True), rls.ScaleByRLSSquareRootState),
    (
      dict(input_statistics="second_moment"),
      second_moment.ScaleByRLSSecondMomentState,
    ),
  ],
)
def test_scale_by_rls_options_dispatch_to_the_peer_forms(options, state_type):
  params, _ = _problem(jnp.float32)
  assert type(rls.scale_by_rls(**options).init(params)) is state_type
  chained = rls.rls(**options).init(params)
  assert type(chained[0].rls) is state_type


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_composes_with_optax(form):
  """chain with clipping, inject_hyperparams and multi_transform: the same
  directions as the bare transform (clipping inactive at norm 1e6)."""
  factory, state_type = FORMS[form]
  params, stream = _problem(jnp.float32)
  want, _ = _run(factory(ratio=0.5), params, stream, form)
  chained = optax.chain(
    optax.clip_by_global_norm(1e6),
    optax.inject_hyperparams(factory)(ratio=0.5),
  )
  got, state = _run(chained, params, stream, form)
  assert type(state[1].inner_state) is state_type
  for g, w in zip(got, want):
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(w)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  labels = {"Dense_0": "rls", "Dense_1": "sgd"}
  mixed = optax.multi_transform(
    {"rls": factory(ratio=0.5), "sgd": optax.sgd(1.0)}, labels
  )
  got, state = _run(mixed, params, stream, form)
  assert set(
    rls.inverse_correlation(state.inner_states["rls"].inner_state)
  ) == {"Dense_0"}
  for g, w in zip(got, want):
    np.testing.assert_allclose(
      g["Dense_0"]["kernel"], w["Dense_0"]["kernel"], rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("form", sorted(FORMS))
def test_momentum_and_l1_wrap_every_form(form):
  """rls.with_momentum_and_l1's L1 term uses the form's own P."""
  factory, _ = FORMS[form]
  params, stream = _problem(jnp.float32, num_steps=1)
  grads, rows = stream[0]
  plain = factory(ratio=0.5)
  state = plain.init(params)
  direction, state = plain.update(
    grads, state, params, layer_inputs=_layer_inputs(rows, form)
  )
  penalised = rls.with_momentum_and_l1(factory(ratio=0.5), l1=0.1)
  got, _ = penalised.update(
    grads,
    penalised.init(params),
    params,
    layer_inputs=_layer_inputs(rows, form),
  )
  p = rls.inverse_correlation(state)["Dense_1"]
  want = direction["Dense_1"]["kernel"] + 0.1 * p @ jnp.sign(
    params["Dense_1"]["kernel"]
  )
  np.testing.assert_allclose(got["Dense_1"]["kernel"], want, rtol=1e-5)


# ---------------------------------------------------------------- bad input

FACTORIES = {
  "scale_by_rls": rls.scale_by_rls,
  **{form: factory for form, (factory, _) in FORMS.items()},
}


@pytest.mark.parametrize("factory", sorted(FACTORIES))
@pytest.mark.parametrize(
  "kwargs,match",
  [
    ({"forgetting_factor": 0.0}, r"forgetting_factor must be in \(0, 1\]"),
    ({"forgetting_factor": 1.01}, r"forgetting_factor must be in \(0, 1\]"),
    ({"ratio": 0.0}, r"ratio must be in \(0, inf\)"),
    ({"ratio": -0.1}, r"ratio must be in \(0, inf\)"),
    ({"init_scale": 0.0}, r"init_scale must be in \(0, inf\)"),
    ({"init_scale": -2.0}, r"init_scale must be in \(0, inf\)"),
    ({"preconditioner_dtype": jnp.int32}, "preconditioner_dtype must be a"),
  ],
)
def test_bad_hyperparameters_are_named(factory, kwargs, match):
  with pytest.raises(ValueError, match=match):
    FACTORIES[factory](**kwargs)


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_non_float_params_are_refused(factory):
  params = {"Dense_0": {"kernel": jnp.ones((3, 2), jnp.int32)}}
  with pytest.raises(ValueError, match="'Dense_0'.*int32.*floating-point"):
    FACTORIES[factory]().init(params)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_layer_inputs_that_do_not_match_the_params(form):
  factory, _ = FORMS[form]
  params, stream = _problem(jnp.float32, num_steps=1)
  grads, rows = stream[0]
  tx = factory()
  state = tx.init(params)
  extra = dict(_layer_inputs(rows, form), Conv_7=rows["Dense_1"])
  with pytest.raises(ValueError, match=r"does not match the params.*Conv_7"):
    tx.update(grads, state, params, layer_inputs=extra)
  missing = _layer_inputs(rows, form)
  del missing["Dense_1"]
  with pytest.raises(ValueError, match=r"'Dense_1'.*no entry"):
    tx.update(grads, state, params, layer_inputs=missing)


def test_second_moment_needs_at_least_one_sampled_row():
  params, stream = _problem(jnp.float32, num_steps=1)
  grads, rows = stream[0]
  tx = rls.scale_by_rls_second_moment()
  empty = dict(rows, Dense_0=jnp.zeros((0, 4)))
  with pytest.raises(ValueError, match=r"'Dense_0'.*S must be >= 1"):
    tx.update(grads, tx.init(params), params, layer_inputs=empty)


def test_default_form_follows_the_dtype_of_p(x64):
  """``square_root=None``: the paper's update of ``P`` when ``P`` is float64,
  Potter's form when it is float32 (also float32 ``P`` of float64 params)."""
  params64, _ = _problem(jnp.float64)
  params32, _ = _problem(jnp.float32)
  tx = rls.scale_by_rls()
  assert type(tx.init(params64)) is rls.ScaleByRLSState
  assert type(tx.init(params32)) is rls.ScaleByRLSSquareRootState
  narrow = rls.scale_by_rls(preconditioner_dtype=jnp.float32)
  assert type(narrow.init(params64)) is rls.ScaleByRLSSquareRootState
  wide = rls.scale_by_rls(preconditioner_dtype=jnp.float64)
  assert type(wide.init(params32)) is rls.ScaleByRLSState
