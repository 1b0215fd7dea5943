"""The views of a job of several ranks: its summary, its live view, its report page."""
