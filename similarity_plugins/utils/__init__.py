"""Leaf helpers shared by every layer (the bottom layer: nothing here imports from the package)."""
