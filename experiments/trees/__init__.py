"""Token trees vs chains (issue #14): `python -m experiments.main --config=configs/trees.py`."""
