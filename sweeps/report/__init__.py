"""Reports from the store: derived numbers with intervals, the paper's tables and the
ones beyond it, their text/Markdown/LaTeX forms, verdicts, advice, compare and history."""
