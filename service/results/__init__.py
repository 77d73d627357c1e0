"""Every answer: rows the store reads turned into the figures the API, the CLI, the console
and /metrics show (windows, bills, overviews, impact, checkpoint advice, jobs, series, the
metrics snapshot, the quarantine listing).

`store/` holds every SQL statement; each function here opens its connection, calls
`store/` and returns plain values, so every surface renders the same figure.
"""
