"""A tiny text classifier: int64 token ids -> embedding -> transformer encoder -> class logits."""

import torch
from torch import nn


class TextClassifier(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def text_classifier(
    vocab: int = 1000, dim: int = 32, heads: int = 2, layers: int = 2, classes: int = 4
) -> nn.Module:
    """The factory a sweep names as `tiny_nets.text:text_classifier`; kwargs come from the sweep."""
    return TextClassifier(vocab, dim, heads, layers, classes)
