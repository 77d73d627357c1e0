"""The benchmark suite: `python -m bench [--quick] [--only NAME]`.

Each benchmark prints its figures (median and spread over at least five runs), appends a
record with the machine's description to `bench/results/<name>.json` and rewrites its
table in `docs/performance.md`.
"""
