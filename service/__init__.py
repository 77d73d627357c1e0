"""ETT telemetry server: ingest, aggregation, read API, metrics and alert rendering."""

__version__ = "0.1.0"
