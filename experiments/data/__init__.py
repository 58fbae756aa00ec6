"""Dataset loaders: standard file formats, one cache, clear errors.

`files` says where every dataset's files come from (data_dir, $DATA_DIR/NAME,
the download cache) and holds the download and md5 code; one module per
dataset reads its format. Callers write `from experiments import data` and
`data.load_ptb_split(...)`, `data.load_mnist(...)`, ...
"""

from experiments.data import cifar10
from experiments.data import files
from experiments.data import imdb
from experiments.data import mnist
from experiments.data import ptb
from experiments.data.cifar10 import load_cifar10
from experiments.data.imdb import load_imdb
from experiments.data.mnist import load_mnist
from experiments.data.ptb import load_ptb_split

__all__ = [
  "cifar10",
  "files",
  "imdb",
  "mnist",
  "ptb",
  "load_cifar10",
  "load_imdb",
  "load_mnist",
  "load_ptb_split",
]
