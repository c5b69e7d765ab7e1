"""Statistics, standard library only: the one Student-t module (``student_t``), the stopping
rule's intervals and verdict, derived-metric intervals, significance, percentiles, re-runs'
design effect, break-even, accuracy statistics. Imports only ``ngb.core.base``.
"""
