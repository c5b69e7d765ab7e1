"""Reusable widgets of the console, one per module (own look in ``DEFAULT_CSS`` only)."""
