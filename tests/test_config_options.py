"""The shared `:key=value` option parser of the config files."""

import pytest

from configs.options import parse_options


def test_parses_each_kind():
    got = parse_options(
        "a=3, b=0.5,c=text,d=0.1/0.2,flag",
        ints=("a",),
        floats=("b",),
        strs=("c",),
        lists=("d",),
        switches=("flag",),
    )
    assert got == {"a": 3, "b": 0.5, "c": "text", "d": [0.1, 0.2], "flag": True}
    tuples = parse_options("g=1/2/4,n=bigram/draft_m", int_lists=("g",), str_lists=("n",))
    assert tuples == {"g": (1, 2, 4), "n": ("bigram", "draft_m")}
    assert parse_options(None) == {} and parse_options("") == {}


@pytest.mark.parametrize(
    "arg, match",
    [
        ("nope=1", "Unknown config option 'nope'"),
        ("nope", "Unknown config switch 'nope'"),
        ("a=x", "a='x'"),
        ("g=1/x", "g='1/x'"),
    ],
)
def test_errors_name_the_option(arg, match):
    with pytest.raises(ValueError, match=match):
        parse_options(arg, ints=("a",), int_lists=("g",))
