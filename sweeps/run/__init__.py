"""Running a sweep: the orchestrator, the writer that flushes results to the store, the
run's state and events, and the links to, claims on and queues of devices."""
