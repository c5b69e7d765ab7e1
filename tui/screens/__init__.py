"""The console's screens: one module per screen or modal."""
