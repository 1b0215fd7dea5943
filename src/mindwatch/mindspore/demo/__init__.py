"""Self-contained demo model and data for ``mindwatch demo``.

Importing this package does not import MindSpore; use ``.data`` and ``.model``
directly (``model`` requires MindSpore).
"""
