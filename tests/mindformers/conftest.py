"""Without MindSpore Transformers (make test-compat's MindSpore 2.8 pair has none to pair
with) these modules are not collected: they import PyYAML and the launcher's helpers, which
come with it."""
import importlib.util

collect_ignore_glob = ["test_*.py"] if importlib.util.find_spec("mindformers") is None else []
