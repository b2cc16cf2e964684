"""Scale out over torch.distributed: importing this package registers the torch.distributed world.

See ``docs/scale_out.md``. The runner and the services reach the world through
[`current_world`][similarity_plugins.networks.parallel.current_world]; this package supplies the implementation.
"""

from __future__ import annotations

from ..networks.parallel import CollectiveError, World, current_world, module_digest, register_world_factory
from .world import (
                    TorchWorld,
                    check_same_everywhere,
                    finish,
                    init_from_env,
                    is_distributed,
                    launched_by_torchrun,
                    rank,
                    shard,
                    world_size,
)

register_world_factory(TorchWorld)

__all__ = ["CollectiveError", "World", "TorchWorld", "current_world", "check_same_everywhere", "finish",
           "init_from_env", "is_distributed", "launched_by_torchrun", "module_digest", "rank", "shard",
           "world_size"]
