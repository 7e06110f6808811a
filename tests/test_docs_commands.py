"""The commands README.md and docs/ show, as written: every ``arrowmt ...``, ``python -m arrowmt ...``,
``python examples/*.py ...`` and ``python benchmarks/*.py ...`` line of their shell blocks names a command that
exists and only options it takes (the options of a command are read from its own parser)."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from arrowmt.testing import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
HISTORY = {"benchmarks-history.md"}  # a record of past runs, with the options of their day
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`((?:arrowmt|python -m arrowmt|python (?:examples|benchmarks)/\w+\.py) [^`]*)`")
SCRIPT = re.compile(r"^(?:\.venv[-a-z]*/bin/)?python3? ((?:examples|benchmarks)/\w+\.py)\b")


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page, words) of every arrowmt or script command in a shell block (continuation lines joined) or in inline
    code (tables of commands: ``[--option]`` and ``--a/--b`` read as options)."""
    found = []
    for page in PAGES:
        if page.name in HISTORY:
            continue
        text = page.read_text(encoding="utf-8")
        lines = [line for block in SHELL_BLOCK.findall(text) for line in block.replace("\\\n", " ").splitlines()]
        for line in [*lines, *INLINE.findall(text)]:
            line = re.sub(r"^(\w+=\S* )+", "", line.split(" #")[0].strip())  # env assignments, comments
            for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
                if part.startswith(("arrowmt ", "python -m arrowmt ")) or SCRIPT.match(part):
                    words = shlex.split(re.sub(r"[\[\]]|(?<=\w)/(?=--)", " ", part))
                    found.append((page.name, words[: words.index("--")] if "--" in words else words))
    return found


COMMANDS = shown_commands()


def arrowmt_options(words: list[str]) -> tuple[str, set[str]]:
    """(the subcommand path, its options) of ``arrowmt WORDS``; an unknown subcommand fails the test."""
    parser, path = build_parser(), []
    for word in words:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or word.startswith("-") or word == "...":
            break
        assert word in actions[0].choices, f"arrowmt {' '.join([*path, word])}: no such command"
        parser, path = actions[0].choices[word], [*path, word]
    return " ".join(path), {o for a in parser._actions for o in a.option_strings}


@cache
def script_options(script: str, subcommand: str | None) -> set[str]:
    """The options ``python SCRIPT [SUBCOMMAND] --help`` lists."""
    command = [sys.executable, str(ROOT / script), *([subcommand] if subcommand else []), "--help"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, f"{script} {subcommand or ''} --help: {done.stderr[-2000:]}"
    return set(re.findall(r"(--?[A-Za-z][\w-]*)", done.stdout))


@cache
def subcommands(script: str) -> set[str]:
    usage = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, cwd=ROOT)
    braces = re.search(r"\{([\w,-]+)\}", usage.stdout)
    return set(braces.group(1).split(",")) if braces else set()


def test_the_pages_show_commands() -> None:
    pages = {page for page, _ in COMMANDS}
    assert {"cli.md", "benchmarks.md", "fairseq.md", "mixtures.md"} <= pages, pages


@pytest.mark.parametrize(("page", "words"), COMMANDS, ids=[" ".join(w)[:70] for _, w in COMMANDS])
def test_a_shown_command_takes_the_options_it_is_shown_with(page: str, words: list[str]) -> None:
    if words[0] == "arrowmt":
        name, known = arrowmt_options(words[1:])
    elif words[:3] == ["python", "-m", "arrowmt"]:
        words = words[2:]
        name, known = arrowmt_options(words[1:])
    else:
        script = SCRIPT.match(" ".join(words)).group(1)  # type: ignore[union-attr]
        rest = words[words.index(next(w for w in words if w.endswith(script))) + 1 :]
        sub = rest[0] if rest and rest[0] in subcommands(script) else None
        name, known = f"{script} {sub or ''}", script_options(script, sub)
    used = {w.split("=", 1)[0] for w in words if re.match(r"^--?[A-Za-z]", w)}
    assert used <= known, f"{page}: `{' '.join(words)}`: {name} takes no {sorted(used - known)}"


def test_results_record_no_machines_own_paths() -> None:
    """Issue 37: result files carried the absolute paths of the machine that made them; they record paths relative
    to the repository (benchmarks/run_one.py ``in_repository``)."""
    absolute = re.compile(r"(?<![\w.])/(?:work|root|home|tmp|Users)/")
    found = [p.name for p in sorted((ROOT / "benchmarks" / "results").glob("*.json")) if absolute.search(p.read_text())]
    assert found == []
