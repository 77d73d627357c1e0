"""The HTTP API: the FastAPI application, its read and admin routes, probes and request metrics."""
