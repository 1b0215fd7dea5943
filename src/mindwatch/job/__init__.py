"""The job: what the ranks decided together and how they spread, written by one rank (rank 0)
to ``job.jsonl`` beside the rank logs, so that a view of a job of thousands of ranks reads
one file and opens a rank's log only for the ranks it names (docs/log-format.md#the-job-log).
Between the ranks (ranks/: the exchange) and the views (report/)."""
