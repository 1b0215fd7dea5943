"""What a finding does: the policy (which actions), carrying them out (checkpoint, report,
stop), and the stops that are not anomalies (signals, sink failures, a user's request)."""
