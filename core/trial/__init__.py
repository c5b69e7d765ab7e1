"""One trial, measured: workers and fresh interpreters, the timed loops and their merge, the
budget and stopping in use, telemetry (CPU, interference, memory, energy), provenance and
versions, the accuracy and profile passes, the live state the console follows.
"""
