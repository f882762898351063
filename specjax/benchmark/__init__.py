"""Measurement harness: step costs (c, T_target(k)), α, and walltime of decoders."""
