"""ngb.sweeps — sweep specs and presets, the orchestrator, the DuckDB store, reports, and the CLI."""
