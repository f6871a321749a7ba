"""envad: env-aware anomaly detection for camera-trap images."""

__version__ = "0.1.0"
