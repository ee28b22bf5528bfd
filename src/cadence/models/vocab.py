"""The character vocabulary of the text models, apart from `text` so reading it loads no torch."""

VOCAB_SIZE = 128
"""ASCII characters map to their code point; everything else to `PLACEHOLDER_ID`."""
PLACEHOLDER_ID = 26
"""ASCII SUB ("substitute"): a control char that never appears in source, so no clash."""
