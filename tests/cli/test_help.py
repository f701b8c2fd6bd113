"""Help written for users: `conch --help` opens with what conch does; every command's help has a description
and ends with one example line."""

from __future__ import annotations

import shlex

import pytest

from conch.cli import EXAMPLES, parser


def test_conch_help_opens_with_what_conch_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="0"):
        parser().parse_args(["--help"])
    text = capsys.readouterr().out
    description = text.split("\n\n", 1)[1]
    assert description.startswith("conch turns NVIDIA Triton ensembles declared in Python")
    assert "conch build ensembles/ --target local --out dist/" in text
    assert "registers" not in text and "module" not in text  # nothing written for maintainers


def test_every_command_has_a_description_and_one_example(capsys: pytest.CaptureFixture[str]) -> None:
    commands = parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    missing = sorted(set(commands) - set(EXAMPLES))
    assert not missing, f"add one line per command to conch.cli.EXAMPLES for: {missing}"
    for name in commands:
        with pytest.raises(SystemExit, match="0"):
            parser().parse_args([name, "--help"])
        text = capsys.readouterr().out
        assert text.rstrip().endswith(f"example:\n  {EXAMPLES[name]}"), name
        assert commands[name].description, name
        assert EXAMPLES[name].startswith(f"conch {name}")
        assert parser().parse_args(shlex.split(EXAMPLES[name])[1:]).command == name  # the example parses
