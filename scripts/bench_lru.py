#!/usr/bin/env python
"""Cost of the online LRU (Zucchet et al. 2023) against its forward pass.

A stack of `L` LRU layers (`d` complex units each, the LRU block head with
`d` outputs, a one-hot input of `--input_size` symbols and a linear readout
over them), batch `B`, float32, timed per time step over `--steps`-step
chunks, side by side in one run:

- forward: the stack's inference step (`rtrl.stack.StackedCell.step`, the
  readout and the loss), no gradient;
- online: the full online step (`rtrl.stack.make_stacked_online_trainer`:
  every layer's exact element-wise RTRL, the spatial errors through the
  heads, Adam on every parameter at every step);
- online, one update per chunk: the same gradients, Adam applied to their
  mean once per chunk (`accumulate_steps`; Zucchet et al. update once per
  sequence), so the step is the gradient computation;
- BPTT: TBPTT over the whole chunk (`--steps` steps) of the same stack, per
  step (the reference that stores the chunk's activations);
- one-step backprop: TBPTT-1 of the same stack (the forward, the backward
  through one step and Adam at every step, no memory of earlier steps):
  what backpropagation through the network costs per step with nothing
  carried, so online / one-step backprop is RTRL's own share of the online
  step (its sensitivity update and the gradient's contraction).

Reported: ms per step, online / forward for both update cadences (the
paper: about 2x inference; our goal: within 3x), online / one-step
backprop, online / BPTT, online / FLOP floor (the step's FLOPs, all at this
machine's large-matmul rate: an optimistic floor, since RTRL's sensitivity
updates are element-wise), and memory per example: the online tangent
(floats of the layers' sensitivities) against BPTT's stored states over the
chunk.

  .venv/bin/python -m scripts.bench_lru                      # d 64..256, 1-4 layers
  .venv/bin/python -m scripts.bench_lru --sizes 64 --layers 1,2
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import optax

from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import heads
from rtrl import stack
from rtrl.online import StepBatch
from rtrl.online import batch_loss
from rtrl.online import broadcast_state
from scripts.benchlib import timing as lib


def make_layers(size: int, num_layers: int):
  layers = []
  for _ in range(num_layers):
    cell = cells.LRU(state_size=size)
    layers.append(
      stack.Layer(cell, estimators.make("rtrl", cell), heads.lru_block(size))
    )
  return tuple(layers)


def make_chunk(key, steps: int, batch: int, symbols: int) -> StepBatch:
  ids = jax.random.randint(key, (steps + 1, batch), 0, symbols)
  return StepBatch(
    inputs=jax.nn.one_hot(ids[:-1], symbols),
    targets=ids[1:],
    weights=jnp.ones((steps, batch)),
    resets=jnp.zeros((steps, batch), bool),
  )


def flops_per_step(
  size: int, num_layers: int, symbols: int, batch: int
) -> float:
  """FLOPs of one online step: the forward GEMMs (input projection `B` to
  `2d` reals, `C`, the GLU's two `d x d`, `D` where the input is not `d`
  wide, the readout) three times (forward, input and weight gradients),
  plus RTRL's element-wise sensitivity update and contraction of `B`'s
  `d x in` complex entries (about 16 FLOPs each)."""
  total, width = 0.0, symbols
  for _ in range(num_layers):
    gemm = 2 * width * 2 * size + 2 * 2 * size * size + 2 * 2 * size * size
    if width != size:
      gemm += 2 * width * size
    total += 3 * gemm + 16 * size * width
    width = size
  total += 3 * 2 * size * symbols
  return total * batch


def measure(size: int, num_layers: int, args, gflops: float) -> dict:
  layers = make_layers(size, num_layers)
  stacked = stack.StackedCell(layers)
  key = jax.random.PRNGKey(0)
  params = stack.init_params(layers, key, args.input_size, args.input_size)
  chunk = make_chunk(
    jax.random.PRNGKey(1), args.steps, args.batch_size, args.input_size
  )
  state0 = broadcast_state(stacked.initial_state(), args.batch_size)

  def forward(params, state, chunk):
    def body(state, batch):
      state = jax.vmap(stacked.step, in_axes=(None, 0, 0))(
        params["cell"], state, batch.inputs
      )
      return state, batch_loss(stacked, params["readout"], state, batch)

    return jax.lax.scan(body, state, chunk)

  online = stack.make_stacked_online_trainer(layers, optax.adam(1e-3))
  online_state = online.init(params, key, args.batch_size)
  per_chunk = stack.make_stacked_online_trainer(
    layers, optax.adam(1e-3), accumulate_steps=args.steps
  )
  per_chunk_state = per_chunk.init(params, key, args.batch_size)
  tbptt = bptt.make_tbptt_trainer(stacked, optax.adam(1e-3), args.steps)
  tbptt_state = tbptt.init(params, key, args.batch_size)
  one_step = bptt.make_tbptt_trainer(stacked, optax.adam(1e-3), 1)
  one_step_state = one_step.init(params, key, args.batch_size)
  entries = {
    "forward": lib.compiled(forward, params, state0, chunk),
    "online": lib.compiled(online.run, online_state, chunk),
    "online_per_chunk": lib.compiled(per_chunk.run, per_chunk_state, chunk),
    "bptt": lib.compiled(tbptt.run, tbptt_state, chunk),
    "one_step": lib.compiled(one_step.run, one_step_state, chunk),
  }
  for entry in entries.values():
    lib.run_timed(entry)
  best = {name: float("inf") for name in entries}
  for _ in range(args.repeats):  # interleaved: the same machine load
    for name, entry in entries.items():
      best[name] = min(best[name], lib.run_timed(entry) / args.steps)
  tangent = lib.count_floats(online_state.tstate) // args.batch_size
  stored = lib.count_floats(state0) // args.batch_size * args.steps
  floor = flops_per_step(size, num_layers, args.input_size, args.batch_size) / (
    gflops * 1e9
  )
  return dict(
    size=size,
    layers=num_layers,
    **best,
    ratio=best["online"] / best["forward"],
    chunk_ratio=best["online_per_chunk"] / best["forward"],
    bptt_ratio=best["online"] / best["bptt"],
    one_step_ratio=best["online"] / best["one_step"],
    floor_ratio=best["online"] / floor,
    tangent_floats=tangent,
    bptt_floats=stored,
  )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="64,128,256")
  parser.add_argument("--layers", default="1,2,4")
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--input_size", type=int, default=50)
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  sizes = [int(s) for s in args.sizes.split(",")]
  depths = [int(s) for s in args.layers.split(",")]
  gflops = lib.matmul_gflops()
  print(
    f"online LRU stack | batch {args.batch_size} | one-hot input "
    f"{args.input_size} | chunk {args.steps} steps | best of "
    f"{args.repeats} | {jax.devices()[0].device_kind} | large matmul "
    f"{gflops:.0f} GFLOP/s | {lib.load_average()}"
  )
  start = time.perf_counter()
  print(
    "\n| d | layers | forward ms/step | online ms/step | online, update "
    "per chunk | one-step backprop ms/step | BPTT ms/step | online / "
    "forward | per chunk / forward | online / one-step backprop | "
    "online / BPTT | online / FLOP floor | online tangent floats/ex. "
    "| BPTT stored floats/ex. |"
  )
  print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for size in sizes:
    for num_layers in depths:
      r = measure(size, num_layers, args, gflops)
      print(
        f"| {size} | {num_layers} | {lib.fmt_ms(r['forward'])} | "
        f"{lib.fmt_ms(r['online'])} | "
        f"{lib.fmt_ms(r['online_per_chunk'])} | "
        f"{lib.fmt_ms(r['one_step'])} | {lib.fmt_ms(r['bptt'])} | "
        f"{r['ratio']:.2f} | {r['chunk_ratio']:.2f} | "
        f"{r['one_step_ratio']:.2f} | "
        f"{r['bptt_ratio']:.2f} | {r['floor_ratio']:.1f} | "
        f"{lib.fmt_count(r['tangent_floats'])} | "
        f"{lib.fmt_count(r['bptt_floats'])} |",
        flush=True,
      )
  print(f"\ntotal {time.perf_counter() - start:.0f}s; {lib.load_average()}")


if __name__ == "__main__":
  main()
