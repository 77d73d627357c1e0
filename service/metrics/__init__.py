"""Prometheus export of the aggregator's results: the snapshot read once per pass and the
custom collector that serves it."""
