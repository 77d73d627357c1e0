"""The Slurm adapter (`ett slurm prolog|epilog|sync`): the scheduler's word about each job.

Slurm's controller runs the hooks at every allocation and release; the reconciler reads
`sacct` for what they missed (docs/slurm.md). Both name a job and its attempts the same way
(`identity`) and make the same event ids, so the service stores each fact once whoever
sends it first. This room is a client of the service over HTTP: it imports nothing of the
server's, and it stays light, because slurmctld waits for a prolog before starting a job.
"""
