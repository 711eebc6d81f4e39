"""Calibration: fit raw microbenchmark measurements into hardware profiles the cost models use (docs/calibration.md)."""
