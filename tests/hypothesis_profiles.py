"""Hypothesis settings for the property tests, and a helper that makes each
property a fast default-suite test plus a thorough slow-set copy.

Two profiles are registered (they are applied per test, never loaded
globally, so other tests' hypothesis settings are untouched):

* ``rtrl-fast``: the default suite. A bounded number of examples, a
  per-example deadline that is generous because a new shape costs a JAX
  compilation, derandomized (the same examples on every run, so the default
  suite is deterministic), no example database on disk.
* ``rtrl-thorough``: the slow set (``-m slow``). Many more random examples.

``HYPOTHESIS_PROFILE=thorough`` (or ``rtrl-thorough``) makes the default-suite
copies thorough too, e.g. to hunt for a counterexample in one file:

  HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest \\
      tests/test_properties_kronecker.py -q -n 0
"""

from __future__ import annotations

from collections.abc import Callable
import datetime
import os

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
import pytest

FAST = "rtrl-fast"
THOROUGH = "rtrl-thorough"

_COMMON = dict(
  database=None,
  print_blob=True,
  suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
)
settings.register_profile(
  FAST,
  max_examples=12,
  derandomize=True,
  deadline=datetime.timedelta(seconds=60),
  **_COMMON,
)
settings.register_profile(THOROUGH, max_examples=200, deadline=None, **_COMMON)


def _default_profile() -> str:
  name = os.environ.get("HYPOTHESIS_PROFILE", FAST)
  return THOROUGH if name in ("thorough", THOROUGH) else FAST


def property_tests(
  strategy,
  thorough_strategy=None,
  max_examples: int | None = None,
  thorough_examples: int | None = None,
) -> Callable[[Callable], tuple]:
  """Decorator: `body(case)` -> (default-suite test, slow thorough test).

  Usage::

    test_foo, test_foo_thorough = property_tests(cases())(check_foo)

  Args:
    strategy: hypothesis strategy drawing the single argument `case` in the
      default suite (typically from a small pool of shapes, since every new
      shape costs a JAX compilation).
    thorough_strategy: the slow set's strategy (`strategy` if None).
    max_examples: default-suite examples (the fast profile's if None).
    thorough_examples: slow-set examples (the thorough profile's if None).
  """
  if thorough_strategy is None:
    thorough_strategy = strategy

  def decorate(body):
    def build(profile: str, examples: int | None, slow: bool):
      def test(case):
        body(case)

      test.__name__ = body.__name__ + ("_thorough" if slow else "")
      test.__qualname__ = test.__name__
      test.__doc__ = body.__doc__
      overrides = {} if examples is None else {"max_examples": examples}
      drawn = thorough_strategy if profile == THOROUGH else strategy
      test = settings(settings.get_profile(profile), **overrides)(
        given(case=drawn)(test)
      )
      return pytest.mark.slow(test) if slow else test

    default = _default_profile()
    fast_examples = max_examples if default == FAST else thorough_examples
    return (
      build(default, fast_examples, slow=False),
      build(THOROUGH, thorough_examples, slow=True),
    )

  return decorate
