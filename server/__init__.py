"""envad server: ONNX Runtime embedding, LanceDB store, FAISS index, pyod detectors, gRPC.

This package never imports torch.
"""
