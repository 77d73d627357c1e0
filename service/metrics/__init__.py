"""Prometheus export of the aggregator's results: the custom collector that renders the
snapshot `service.results.snapshot` builds once per pass, and the bounds on its series."""
