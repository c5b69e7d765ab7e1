"""The house's plumbing, below everything else in ``ngb.core``: the error classes, files read and
written safely, content-addressed artifacts, captured stderr, a child process for the operator's
code, the machine's tuning state. Imports nothing of ``ngb.core`` above it.
"""
