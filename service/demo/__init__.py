"""The demo fleet: a deterministic simulated fleet, and the poster that sends it through
the HTTP API like any trainer."""
