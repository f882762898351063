"""Reproduction of Leviathan et al. 2023's α/c tables and speedup curves (see README.md)."""
