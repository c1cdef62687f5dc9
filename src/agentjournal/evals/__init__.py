"""Evals and experiments on the record: scorers, eval runs, experiments on forks."""
