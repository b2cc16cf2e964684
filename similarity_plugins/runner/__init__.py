"""The runner: ``compare``, ``score`` and grids, and what every metric call goes through (isolation, the guard
that keeps the user's model as it was, repeats over seeds, rank-0 results under torch.distributed)."""
