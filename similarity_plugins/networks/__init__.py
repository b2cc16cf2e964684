"""Torch services the metrics draw on: data, activations and the per-call context, splitting a model at a layer,
fingerprints of models and inputs, and the torch.distributed world."""
