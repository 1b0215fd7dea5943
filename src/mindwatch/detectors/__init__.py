"""Detectors: one small class per rule family (see base.Detector)."""
from .base import Detector
from .grad_bounds import GradBoundsDetector
from .nonfinite import NonFiniteDetector

__all__ = ["Detector", "GradBoundsDetector", "NonFiniteDetector"]
