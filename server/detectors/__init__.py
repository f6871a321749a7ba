"""Anomaly detectors on embeddings: the paper's pyod registry, calibration, bundles, Stylist.

Importing this package loads no detector library; `registry` imports pyod lazily per
detector so the server starts fast.
"""
