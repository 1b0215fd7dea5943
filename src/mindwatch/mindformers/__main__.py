"""``python -m mindwatch.mindformers``: prints the folder to pass as ``run_mindformer.py
--register_path`` (it holds ``mindwatch_callback.py``)."""
import os

print(os.path.join(os.path.dirname(os.path.abspath(__file__)), "register"))
