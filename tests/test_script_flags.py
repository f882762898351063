"""Scripts refuse list flags with names they do not know, at flag parsing (before any model
loads): `--parts=nope` used to load SmolLM2 and then run nothing, and an unknown `--programs`
or `--tasks` entry was skipped without a word."""

import pathlib
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parent.parent / "scripts"


@pytest.mark.parametrize(
    "script, flag, message",
    [
        ("bench_real.py", "--parts=speed,nope", "each of --parts must be one of"),
        ("bench_real.py", "--trees=2-x", "each of --trees must be a branching"),
        ("aot_compile_check.py", "--programs=gen", "each of --programs must be generate or train"),
        ("run_sharded.py", "--tasks=", "each of --tasks must be generate or train"),
    ],
)
def test_an_unknown_list_entry_is_refused_by_name(script, flag, message):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / script), flag],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"FATAL Flags parsing error: flag {flag.split('=')[0]}" in proc.stderr
    assert message in proc.stderr


def test_head_trees_without_heads_is_refused_at_flag_parsing():
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_real.py"), "--parts=head_trees"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "FATAL Flags parsing error" in proc.stderr
    assert "--parts=head_trees measures trained EAGLE heads: give --heads" in proc.stderr
