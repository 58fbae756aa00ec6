"""`python -m experiments.reproduce TARGET --scale ... --workdir ...`: see
`experiments/reproduce/cli.py`."""

import sys

from experiments.reproduce import cli

sys.exit(cli.main())
