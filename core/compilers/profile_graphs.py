"""Which kernels a runtime fused, read from the graph the runtime itself executes.

A kernel's name says little about what it absorbed: ONNX Runtime names a convolution that took
in the ReLU after it by that ReLU's output (``/act1/Relu_output_0_nchwc``) but one that also took
in the residual add keeps the convolution's name (``/layer1/layer1.0/conv2/Conv_output_0_nchwc``),
and a name heuristic flags a ``Flatten`` whose name holds "relu". So the fused flag and the
operators a kernel came from are read from the optimised graph instead, as the vendors' own tools
show it:

- ONNX Runtime: the optimised model it saves (``SessionOptions.optimized_model_filepath``). A
  node is fused where ORT's fusion passes made it: a ``Fused*`` or ``com.microsoft`` fused op
  (``FusedConv``, ``FusedGemm``, ``FusedMatMul``), a convolution with an ``activation`` attribute
  (Conv+ReLU), or an NCHWc convolution with a fourth input (Conv+Sum, the residual add).
- OpenVINO: the runtime model (``CompiledModel.get_runtime_model()``): each executed node's
  ``originalLayersNames`` lists the model's operators it runs; more than one is a fusion.

resnet18 under both: 17 fused convolutions (9 Conv+ReLU, 8 Conv+Add+ReLU).
"""

from __future__ import annotations

from pathlib import Path

#: ONNX Runtime op types that are fusions by name (contrib ops made by its fusion passes)
_ORT_FUSED_TYPES = (
    "FusedConv", "FusedGemm", "FusedMatMul", "Attention", "SkipLayerNormalization", "BiasGelu",
    "FastGelu", "BiasSoftmax", "EmbedLayerNormalization", "MultiHeadAttention",
    "GroupQueryAttention",
)  # fmt: skip


def ort_fusions(optimised: Path) -> dict[str, tuple[str, ...]]:
    """Node name -> the operators it fused (its own type first), for each fused node of the
    optimised model ONNX Runtime saved; nodes that fused nothing are left out."""
    import onnx

    graph = onnx.load(str(optimised), load_external_data=False).graph
    out: dict[str, tuple[str, ...]] = {}
    for node in graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        parts: list[str] = []
        activation = attrs.get("activation")
        if isinstance(activation, bytes):
            activation = activation.decode()
        nchwc_sum = node.domain == "com.microsoft.nchwc" and node.op_type == "Conv"
        if nchwc_sum and len(node.input) > 3 and node.input[3]:
            parts.append("Sum")
        if activation:
            parts.append(str(activation))
        if node.op_type in _ORT_FUSED_TYPES or node.op_type.startswith("Fused") or parts:
            base = node.op_type.removeprefix("Fused") or node.op_type
            out[node.name] = (base, *parts)
    return out


def openvino_origins(runtime_model: object) -> dict[str, tuple[str, ...]]:
    """Executed node name -> the model's operators it runs (``originalLayersNames``), from
    OpenVINO's runtime model."""
    out: dict[str, tuple[str, ...]] = {}
    for op in runtime_model.get_ordered_ops():  # type: ignore[attr-defined]
        info = op.get_rt_info()
        # an RTMap has no .get
        value = info["originalLayersNames"] if "originalLayersNames" in info else ""  # noqa: SIM401
        names = str(getattr(value, "value", value))  # an OVAny: its value is the text
        out[op.get_friendly_name()] = tuple(n for n in names.split(",") if n)
    return out
