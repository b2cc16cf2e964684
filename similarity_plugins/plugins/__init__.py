"""Built-in metric plugins. Each is registered like a third-party plugin (see host/manager.py)."""
