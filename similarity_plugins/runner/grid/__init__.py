"""Grids: ``compare_grid`` over many (model, layer) nodes, each cell one metric call, each node's parts computed
once; the `Grid` result, its files (resume, JSON), the best pair and calibrated scores of its blocks, and grids
read from an activation store."""
