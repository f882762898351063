"""The session's allocator setting (tests/allocator.py): workers run on mimalloc where it is
installed, and the preload is put in place once, first, and only when asked."""

import importlib.metadata
import os

import allocator
import pytest


@pytest.mark.skipif(
    "PYTEST_XDIST_WORKER" not in os.environ, reason="only processes the session starts preload it"
)
def test_a_worker_allocates_through_mimalloc():
    if os.environ.get(allocator.OPT_OUT) == "system" or allocator.library() is None:
        pytest.skip("opted out, or cmeel-mimalloc is not installed here")
    assert allocator.active(), "LD_PRELOAD=" + os.environ.get("LD_PRELOAD", "")


def test_preload_goes_first_once_and_keeps_what_was_there(monkeypatch):
    monkeypatch.setattr(allocator, "library", lambda: "/x/libmimalloc.so")
    env = {"LD_PRELOAD": "/y/libother.so"}
    assert allocator.preload(env) == "/x/libmimalloc.so"
    assert allocator.preload(env) == "/x/libmimalloc.so"
    assert env["LD_PRELOAD"] == "/x/libmimalloc.so:/y/libother.so"
    fresh = {}
    allocator.preload(fresh)
    assert fresh == {"LD_PRELOAD": "/x/libmimalloc.so"}


def test_opting_out_or_a_missing_wheel_preloads_nothing(monkeypatch):
    env = {allocator.OPT_OUT: "system"}
    assert allocator.preload(env) is None and "LD_PRELOAD" not in env

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    env = {}
    assert allocator.library() is None
    assert allocator.preload(env) is None and env == {}
