"""The `--config=configs/x.py:key=value,switch` string options every config file accepts.

big_vision style: one small parser shared by all configs, so a typo is an error that lists the
options the config knows, and every config reads its options the same way.
"""

from __future__ import annotations


def parse_options(
    arg: str | None,
    *,
    ints=(),
    floats=(),
    strs=(),
    lists=(),
    int_lists=(),
    str_lists=(),
    switches=(),
) -> dict:
    """Parses "k=v,k2=v2,switch" into a dict.

    Args:
      arg: the text after the colon in --config=path:arg (None or "" for none).
      ints, floats, strs: option names whose values are converted to int, float or kept as str.
      lists: option names whose values are "/"-separated floats ("0.5/0.9" -> [0.5, 0.9]).
      int_lists, str_lists: the same, of ints ("1/2/4" -> (1, 2, 4)) or of strings, as tuples
        (what a ConfigDict field holds).
      switches: names given without "=value"; they map to True.

    Returns:
      {name: value}.

    Raises:
      ValueError: an unknown option or switch, or a value that does not convert.
    """
    kinds = {**{k: int for k in ints}, **{k: float for k in floats}, **{k: str for k in strs}}
    kinds.update({k: "list" for k in lists})
    kinds.update({k: (int,) for k in int_lists})
    kinds.update({k: (str,) for k in str_lists})
    options = {}
    for item in (arg or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            if key not in switches:
                raise ValueError(f"Unknown config switch {key!r}; switches: {sorted(switches)}")
            options[key] = True
            continue
        kind = kinds.get(key)
        if kind is None:
            raise ValueError(f"Unknown config option {key!r}; options: {sorted(kinds)}")
        try:
            if kind == "list":
                options[key] = [float(v) for v in value.split("/") if v]
            elif isinstance(kind, tuple):
                options[key] = tuple(kind[0](v) for v in value.split("/") if v)
            else:
                options[key] = kind(value)
        except ValueError as e:
            raise ValueError(f"Config option {key}={value!r}: {e}") from None
    return options
