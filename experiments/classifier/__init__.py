"""The RLS paper's classifier experiments (MNIST, CIFAR-10, IMDB), one
experiment for all three: `presets` (config fields and optimiser presets),
`tasks` (one `Task` per dataset: data, network, name), `models` (the
networks), `training` (losses, optimiser, one training step), `experiment`
(the run loop's pieces, `train`) and `timing` (time per step, Table I)."""
