"""Small example models for `ngb` (examples/own-models): copy this package and put yours here."""
