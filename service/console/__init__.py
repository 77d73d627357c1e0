"""The web console under /ui/: server-rendered pages over the read queries."""
