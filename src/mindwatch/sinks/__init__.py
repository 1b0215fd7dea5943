"""Sinks: views of the run that receive every record (``write``) and decide nothing."""
