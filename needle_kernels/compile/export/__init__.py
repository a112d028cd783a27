"""Export of traced graphs to exchange formats."""
from .onnx_export import export_onnx, to_onnx
