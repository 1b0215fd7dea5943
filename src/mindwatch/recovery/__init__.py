"""Recovery without a restart: withholding an anomalous update (``skip``) and going back to a
snapshot (``rewind``), each counted towards escalation."""
