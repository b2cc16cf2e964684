"""A wrapper of every metric call: the seconds each metric takes, per call, logged and summed (entry-point group
``similarity_plugins.wrappers``, so it is loaded with the plugin manager and sees the first call)."""
import logging
import time
from collections import defaultdict

import similarity_plugins

LOG = logging.getLogger(__name__)
SECONDS = defaultdict(float)  # metric -> seconds over every call of this process
CALLS = defaultdict(int)      # metric -> calls


@similarity_plugins.hookimpl(wrapper=True)
def similarity(metric, layer):
    start = time.perf_counter()
    try:
        return (yield)  # the metric's value, passed on unchanged
    finally:
        seconds = time.perf_counter() - start
        SECONDS[metric] += seconds
        CALLS[metric] += 1
        LOG.info("%s at %s: %.4f s", metric, layer, seconds)
