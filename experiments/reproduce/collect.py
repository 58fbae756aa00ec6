"""`reproduce.py TARGET --collect`: the figures and tables from what the
programs wrote, training nothing.

The target runs in collect mode (`common.collecting`): every program is
read as far as it ran, exactly as the local launcher reads a finished one,
so a complete collect writes the same files, bit for bit. A figure built
with programs missing says so: each PNG the target wrote gets a red banner
naming them, each Markdown table a line, and `WORKDIR/TARGET/INCOMPLETE.md`
lists them (a complete collect removes it); `--collect` then exits with
`INCOMPLETE_EXIT`, so nothing incomplete passes as done.
"""

from __future__ import annotations

from collections.abc import Sequence
import os

from experiments.reproduce import common
from experiments.reproduce import programs as programs_lib

INCOMPLETE_FILE = "INCOMPLETE.md"
INCOMPLETE_EXIT = 3


def _banner(path: str, text: str) -> None:
  """Puts `text` in white on red above the image at `path`."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from PIL import ImageDraw  # pylint: disable=g-import-not-at-top
  from PIL import ImageFont  # pylint: disable=g-import-not-at-top

  image = Image.open(path).convert("RGB")
  size = max(14, image.width // 60)
  font = ImageFont.load_default(size=size)
  width = max(20, int(image.width / (0.55 * size)))  # characters a line
  lines = [text[i : i + width] for i in range(0, len(text), width)][:8]
  height = int(1.3 * size) * len(lines) + size // 2
  framed = Image.new("RGB", (image.width, image.height + height), "white")
  framed.paste(image, (0, height))
  draw = ImageDraw.Draw(framed)
  draw.rectangle((0, 0, image.width, height - 1), fill=(190, 0, 0))
  for row, line in enumerate(lines):
    draw.text(
      (8, size // 4 + int(1.3 * size) * row), line, fill="white", font=font
    )
  framed.save(path)


def mark_incomplete(
  target: programs_lib.Target,
  files: Sequence[str],
  missing: Sequence[common.Program],
) -> str:
  """Marks the target's figures and tables as built without `missing`;
  returns the message."""
  keys = ", ".join(target.key(p) for p in missing)
  message = (
    f"INCOMPLETE: {len(missing)} program(s) of {target.name} missing or "
    f"unfinished: {keys}"
  )
  for path in files:
    if path.endswith(".png") and os.path.exists(path):
      _banner(path, message)
    elif path.endswith(".md") and os.path.exists(path):
      with open(path, "a") as f:
        f.write(f"\n**{message}**\n")
  os.makedirs(target.folder, exist_ok=True)
  with open(os.path.join(target.folder, INCOMPLETE_FILE), "w") as f:
    f.write(f"# {target.name}: incomplete\n\n{message}\n\n")
    f.write("Run `--status` to see why, then `--collect` again.\n")
  return message


def collect(
  target: programs_lib.Target,
) -> tuple[common.Result | None, list[common.Program]]:
  """Builds the target from what exists; returns `(result or None, the
  programs missing)`. A target that cannot be built at all without its
  missing programs (a cosine run needs its trained network) returns no
  result; with nothing missing, its error is raised."""
  mode = common.collecting(dict(target.overrides))
  marker = os.path.join(target.folder, INCOMPLETE_FILE)
  try:
    result = target.fn(target.scale, target.workdir, mode)
  except Exception as error:  # pylint: disable=broad-except
    missing = [p for p in mode.programs or [] if not p.done]
    if not missing:
      raise
    message = mark_incomplete(target, [], missing)
    print(f"{message}\nNothing built ({type(error).__name__}: {error})")
    return None, missing
  missing = [p for p in mode.programs or [] if not p.done]
  if missing:
    print(mark_incomplete(target, result.files, missing), flush=True)
  elif os.path.exists(marker):
    os.remove(marker)
  return result, missing
