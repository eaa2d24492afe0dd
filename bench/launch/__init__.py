"""Spreading one sweep over many devices and machines: a shared case queue for one worker process per device
(queue.py, devices.py) and a Slurm job array through submitit (slurm.py; each job runs shard_job.ShardJob).
Every worker is an ordinary `bench run` writing its own journalled results file; the launcher merges them into the
one results file."""
