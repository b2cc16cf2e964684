"""The plugin host and the shared services every metric draws on."""
