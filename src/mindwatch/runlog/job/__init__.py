"""The job as the views read it: job.jsonl, or the rank logs condensed (view.py)."""
