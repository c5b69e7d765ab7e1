"""What a trial is and what it leaves, as plain JSON-round-tripping data: ``TrialSpec``,
``MeasureSettings``, ``TrialResult`` and its declared ``extra``, the agent's events and checkpoint,
and the settings a spec carries (serving, arrivals, algorithm names).
"""
