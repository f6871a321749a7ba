"""envad training: env-aware pretraining of ResNet-18 encoders, ONNX export, evaluation."""
