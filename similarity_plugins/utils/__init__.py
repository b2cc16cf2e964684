"""Utilities at the bottom of the layering: they import nothing from the rest of the package."""
