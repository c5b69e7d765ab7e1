"""Models and what is done to them before a compiler sees them: timm names and blocks, users' own
sources and inputs, ONNX graphs, optimisations (int8, pruning, DLAS ladders), the algorithm
rewrite, precision flags, labelled data.
"""
