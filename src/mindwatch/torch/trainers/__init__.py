"""The trainers that own the loop: Hugging Face's ``Trainer`` (hf.py) and Lightning's
(lightning.py), each one callback around the same ``TrainMonitor``. Each module imports its
trainer's package; ``mindwatch.torch`` imports them only when asked for the callback."""
