"""A model served under load (``ngb serve``): the load generator, arrivals replayed, latency
statistics, the peak search and the served trial.
"""
