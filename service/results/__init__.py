"""What the aggregator derived, read back for decisions: impact, checkpoint advice, quarantine.

`store/` holds the tables and the raw event and result paths; this room holds the queries
that turn stored results into the answers the decision endpoints give, and the console's
reads that the read API has no query for (series per step, a model's jobs, a job's marks).
"""
