"""ngb.core — trial types, compilers registry, models and blocks, measurement protocol, metrics.

Only the standard library and numpy are imported at module level anywhere in this package; torch,
timm, onnxruntime, openvino, tvm and tensorrt are imported inside the functions that need them, so
that the CLI, the TUI and the device agent start fast and ship light.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
