"""Reading for evals: a session line's turns as scorers see them, and eval runs read back."""
