"""What a view's anomaly table must list, worked out from the log's anomaly records without
mindwatch.events: one row per run of consecutive records of one rank and step (a hang alone),
its kinds in the order the line names them (the acting anomaly's first)."""
from itertools import groupby

_STRENGTH = ["warn", "checkpoint", "skip", "rewind", "stop", "abort"]


def _key(record):
    return (max(map(_STRENGTH.index, record["actions"] or ["warn"])), len(record["actions"]))


def expected_events(anomalies):
    """``[(step, rank, [kinds])]`` of ``anomalies`` (records in log order)."""
    found = []
    for (rank, step, _), records in groupby(
            enumerate(anomalies), key=lambda pair: (pair[1]["rank"], pair[1]["step"],
                                                    pair[0] if pair[1]["anomaly"] == "hang"
                                                    else None)):
        records = [record for _, record in records]
        lead = max(records, key=_key)        # max keeps the first of equals
        kinds = [lead["anomaly"]] + [r["anomaly"] for r in records
                                     if r["anomaly"] != lead["anomaly"]]
        found.append((step, rank, list(dict.fromkeys(kinds))))
    return found
