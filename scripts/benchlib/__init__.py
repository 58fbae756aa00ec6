"""What the benchmarks under `scripts/` share: timing (`timing`), the RTRL
benchmark's cost model (`costs`) and tables (`report`), r-OK's step pieces
(`ok_pieces`), the run loop's programs (`programs`), and braintrace's side of
the peer comparison (`peers_*`)."""
