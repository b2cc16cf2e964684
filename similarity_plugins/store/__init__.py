"""The activation store: entries of (model, layer) activations on disk, written once and read memory-mapped."""
