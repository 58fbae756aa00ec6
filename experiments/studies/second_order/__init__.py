"""`experiments.studies.compare_second_order`'s parts: the tasks and optimisers both
runners share (`common`), the optax runner (`optax_runs`), kfac-jax's
(`kfac_runs`, in its own environment) and the tables and figure
(`report`)."""
