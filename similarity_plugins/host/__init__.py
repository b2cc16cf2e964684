"""The plugin host: hookspecs, the plugin manager and entry points, the metric registry, the option contract and
its value checks, and the result types hooks return. It knows no metric family and no network."""
