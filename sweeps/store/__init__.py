"""The results store: one DuckDB file -- schema and migrations, connections shared with
other processes, ingest of a run's results, read-only SQL, import and export."""
