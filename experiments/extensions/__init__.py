"""The paper's open extensions (Leviathan et al. 2023, section 6), built and measured."""
