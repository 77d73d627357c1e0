"""The web console under /ui/: server-rendered pages over the answers of `service.results`."""
