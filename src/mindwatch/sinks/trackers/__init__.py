"""Experiment trackers (``report_to``): MLflow first; SwanLab and W&B to come (issue #45)."""
