"""ngb.sweeps — sweep specs and presets, orchestrator, DuckDB store, reports, and the CLI."""
