"""Write the example's model files: tiny_cnn.onnx (ONNX), the same model as tiny_cnn_ext.onnx
with its weights in an external data file (tiny_cnn_ext.onnx.data, as torch's exporter writes
models over 2 GB), and tiny_text.pt2 (torch.export).

    python examples/own-models/make_files.py [OUT_DIR]      # default: this folder

Both are exported with a dynamic batch dimension, so a sweep may run them at any batch size.
They are generated rather than committed: a .pt2 file is tied to the torch version that wrote it.
"""

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "single_file"))

from my_cnn import build  # noqa: E402
from tiny_nets.text import text_classifier  # noqa: E402


def main(out: Path) -> None:
    write_onnx(out)
    write_pt2(out)
    print(f"wrote tiny_cnn.onnx, tiny_cnn_ext.onnx (+ .data) and tiny_text.pt2 in {out}")


def write_onnx(out: Path) -> None:
    """tiny_cnn.onnx, and the same model as tiny_cnn_ext.onnx + tiny_cnn_ext.onnx.data."""
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cnn = build().eval()
    torch.onnx.export(
        cnn,
        (torch.randn(2, 3, 32, 32),),
        str(out / "tiny_cnn.onnx"),
        dynamo=False,
        opset_version=17,
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
    )
    import onnx

    onnx.save_model(
        onnx.load(str(out / "tiny_cnn.onnx")),
        str(out / "tiny_cnn_ext.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="tiny_cnn_ext.onnx.data",
        size_threshold=0,
    )


def write_pt2(out: Path) -> None:
    """tiny_text.pt2, a torch.export program of the text classifier (after ``write_onnx``, which
    seeds torch: ``main`` writes the very files it always wrote)."""
    out.mkdir(parents=True, exist_ok=True)
    text = text_classifier().eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(
        text, (torch.randint(0, 1000, (2, 16)),), dynamic_shapes=({0: batch},)
    )
    torch.export.save(program, str(out / "tiny_text.pt2"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
