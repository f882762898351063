"""Leviathan et al.'s open extensions, built and measured (issue #19)."""
