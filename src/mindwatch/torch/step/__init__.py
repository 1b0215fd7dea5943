"""The protected optimizer step: measured, judged on the device, withheld (ProtectedStep)."""
