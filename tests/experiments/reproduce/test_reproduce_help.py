"""`scripts/reproduce.py --help` documents every option with its default
(issue 52 item 2), and exits 0."""

from __future__ import annotations

import re

import pytest

from experiments.reproduce import cli


def test_help_documents_every_option_with_its_default(capsys):
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["--help"])
  assert exit_info.value.code == 0
  text = " ".join(capsys.readouterr().out.split())
  options = [
    option
    for action in cli._parser()._actions  # pylint: disable=protected-access
    for option in action.option_strings[-1:]
    if option != "--help"
  ]
  assert len(options) >= 20
  for option, following in zip(options, options[1:] + ["$"]):
    start = text.index(f" {option} ", text.index("options:"))
    end = text.index(f" {following}", start) if following != "$" else None
    entry = text[start:end]
    assert re.search(r"\(default: [^)]+\)", entry), (option, entry)
  assert "(default: 1440)" in text and "(default: local)" in text


def test_a_program_that_cannot_go_on_is_one_error_line(
  tmp_path, monkeypatch, capsys
):
  """A run error inside a target (here a log holding two runs) ends the
  command with its one line and exit status, no traceback (issue 49)."""
  from experiments import reproduce  # pylint: disable=g-import-not-at-top
  from experiments.loop import errors  # pylint: disable=g-import-not-at-top

  def broken(scale, workdir, mode=None):
    """A target whose program's log is broken."""
    raise errors.MetricsLogError(
      f"{workdir}/metrics.jsonl:2 has step 5 after 5"
    )

  monkeypatch.setattr(reproduce, "targets", lambda: {"broken": (None, broken)})
  status = cli.main(["broken", "--workdir", str(tmp_path)])
  err = capsys.readouterr().err
  assert status == 2
  assert err.startswith("Error: ") and "metrics.jsonl:2 has step 5" in err
  assert "Traceback" not in err
