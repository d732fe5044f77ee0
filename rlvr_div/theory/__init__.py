"""The theory: β ↔ validity closed forms (calibration, its report) and the validity-target β controller."""
