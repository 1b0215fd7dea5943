"""Reading run logs back: every view (summary, report, live view) starts here."""
from .reader import RankLog, RunLog, RunLogError, read_rank_log, read_run

__all__ = ["RankLog", "RunLog", "RunLogError", "read_rank_log", "read_run"]
