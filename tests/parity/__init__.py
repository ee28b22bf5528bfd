"""The parity matrix: models users bring x habits of ordinary training loops x strategies, each
cell compared with torch DDP on the same seed and data (see `matrix.py`)."""
