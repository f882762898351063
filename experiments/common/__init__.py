"""Code the experiments share: trained models (`models.py`) and the generate/bench pair (`pair.py`).

An experiment imports the library and this package, never another experiment's modules.
"""
