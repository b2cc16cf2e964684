"""Helpers shared by the test modules: models built here, repository paths, the docs-block reader and runner,
and the workers the torch.distributed tests spawn. Test modules import from here, never from each other."""
