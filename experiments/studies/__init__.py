"""Studies that train to measure a choice (run as `python -m
experiments.studies.NAME`), each writing the numbers a docs page quotes."""
