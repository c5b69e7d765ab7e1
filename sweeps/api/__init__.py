"""The Python API for notebooks: ``ngb.measure``, ``ngb.open_results``, ``ngb.compare``."""
