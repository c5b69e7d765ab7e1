"""Sweep files: TOML parsed, checked and expanded into trials; the models they name.
The built-in presets are in ``sweeps/presets/``."""
