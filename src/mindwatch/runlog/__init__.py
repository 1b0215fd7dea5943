"""Reading run logs back: every view (summary, report, live view) starts here."""
from .lines import LineDecoder, RunLogError
from .reader import ALL, FIRST, NONE, RankLog, RunLog, read_rank_log, read_run
from .scan import RankScan

__all__ = ["ALL", "FIRST", "NONE", "LineDecoder", "RankLog", "RankScan", "RunLog",
           "RunLogError", "read_rank_log", "read_run"]
