"""The scheduler-neutral view of a queue: max-min fair shares among accounts
(:mod:`.fairshare`) and the bounded ``account`` label of the queue families, at most N accounts
per partition with the rest summed (:mod:`.accounts`). The Slurm exporter and the simulator
fill the same families through these.
"""
