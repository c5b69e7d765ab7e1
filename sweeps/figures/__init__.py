"""The paper's figures as PNG/SVG/PDF from report/'s numbers, and the one-file HTML
report that holds tables and figures together."""
