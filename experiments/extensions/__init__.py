"""The paper's open extensions, measured: adaptive γ, hierarchical speculation, beam search."""
