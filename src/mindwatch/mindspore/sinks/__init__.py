"""Views written in MindSpore's own formats (the core's sinks know no framework)."""
