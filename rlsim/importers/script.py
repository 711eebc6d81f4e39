"""Read the overrides of a launch script's `python3 -m verl... key=value ...` command: backslash continuations,
variables assigned earlier (`MODEL=...`, `export X=...`), `$X`, `${X}`, `${X:-default}` and `$((arithmetic))`
expanded as bash would, quotes removed. Control flow is not followed: every assignment counts, in file order."""
from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path

from rlsim.errors import Problem, ScenarioError
from rlsim.yamlsource import read_text_file

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+|declare\s+)?([A-Za-z_]\w*)=(.*)$")
_NAME = re.compile(r"[A-Za-z_]\w*")
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:=default}
_BRACED = re.compile(r"([A-Za-z_]\w*)(?::?[-=](.*))?", re.S)


@dataclass(frozen=True)
class Word:
    text: str
    line: int


@dataclass(frozen=True)
class Command:
    """The framework command found in a script: the module it runs and its arguments after the module."""

    module: str
    words: list[Word]
    line: int


def read_script(path: Path, modules: tuple[str, ...]) -> Command:
    """The first command of the script that runs `python -m <module>` for a module starting with one of `modules`."""
    text = read_text_file(path, "a launch script")
    variables: dict[str, str] = {}
    for first_line, pieces in _logical_lines(text):
        assignment = _ASSIGNMENT.match(pieces[0][1]) if len(pieces) == 1 else None
        if assignment:
            words = _words(assignment.group(2), variables, str(path), first_line)
            variables[assignment.group(1)] = words[0] if words else ""
            continue
        found = [Word(w, line) for line, piece in pieces for w in _words(piece, variables, str(path), line)]
        texts = [w.text for w in found]
        for i, text_word in enumerate(texts[:-1]):
            if text_word == "-m" and texts[i + 1].startswith(modules) and _is_python(texts[:i]):
                return Command(module=texts[i + 1], words=found[i + 2:], line=first_line)
    raise ScenarioError(Problem(f"no `python3 -m {modules[0]}...` command in this script (expected a launch script "
                                "whose command line is the framework's trainer with key=value overrides)",
                                file=str(path)))


def _is_python(before: list[str]) -> bool:
    return any(Path(w).name.startswith("python") for w in before)


def _logical_lines(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """(first line number, [(line number, text)]) per command, joining backslash continuations."""
    commands: list[tuple[int, list[tuple[int, str]]]] = []
    pending: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.rstrip()
        continued = stripped.endswith("\\") and not stripped.endswith("\\\\")
        pending.append((number, stripped[:-1] if continued else stripped))
        if not continued:
            commands.append((pending[0][0], pending))
            pending = []
    if pending:
        commands.append((pending[0][0], pending))
    return commands


def _words(text: str, variables: dict[str, str], file: str, line: int) -> list[str]:
    """Split a line into words as bash would after expansion; an unquoted `#` starting a word begins a comment."""
    words: list[str] = []
    current: list[str] = []
    started = False
    i = 0
    while i < len(text):
        char = text[i]
        if char in " \t" or char == ";":
            if started:
                words.append("".join(current))
                current, started = [], False
            i += 1
        elif char == "#" and not started:
            break
        elif char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ScenarioError(Problem("unterminated single quote", file=file, line=line))
            current.append(text[i + 1:end])
            started, i = True, end + 1
        elif char == '"':
            end = _closing_quote(text, i, file, line)
            current.append(_expand(text[i + 1:end], variables, file, line))
            started, i = True, end + 1
        elif char == "$":
            expanded, i = _dollar(text, i, variables, file, line)
            current.append(expanded)
            started = True
        elif char == "\\" and i + 1 < len(text):
            current.append(text[i + 1])
            started, i = True, i + 2
        else:
            current.append(char)
            started, i = True, i + 1
    if started:
        words.append("".join(current))
    return words


def _closing_quote(text: str, start: int, file: str, line: int) -> int:
    i, depth = start + 1, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith("${", i) or text.startswith("$(", i):
            depth += 1
        elif text[i] in "})" and depth:
            depth -= 1
        elif text[i] == '"' and not depth:
            return i
        i += 1
    raise ScenarioError(Problem("unterminated double quote", file=file, line=line))


def _expand(text: str, variables: dict[str, str], file: str, line: int) -> str:
    """Expand `$` expressions inside double quotes (no word splitting)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$":
            expanded, i = _dollar(text, i, variables, file, line)
            out.append(expanded)
        elif text[i] == "\\" and i + 1 < len(text) and text[i + 1] in '$"\\`':
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _dollar(text: str, i: int, variables: dict[str, str], file: str, line: int) -> tuple[str, int]:
    """Expand the `$...` expression at text[i]; returns its value and the index after it. Unset variables are empty,
    as in bash (the environment is not read, so an import gives the same file on every machine)."""
    if text.startswith("$((", i):
        end = _matching(text, i + 1, "(", ")", file, line)
        return str(_arithmetic(text[i + 3:end - 1], variables, file, line)), end + 1
    if text.startswith("${", i):
        end = _matching(text, i + 1, "{", "}", file, line)
        parts = _BRACED.fullmatch(text[i + 2:end])
        if parts is None:
            return "", end + 1
        value = variables.get(parts.group(1), "")
        if parts.group(2) is not None and not value:
            value = " ".join(_words(parts.group(2), variables, file, line))
        return value, end + 1
    if text.startswith("$(", i):
        end = _matching(text, i + 1, "(", ")", file, line)
        return "", end + 1  # a command's output is not known without running it
    name = _NAME.match(text, i + 1)
    if name:
        return variables.get(name.group(0), ""), name.end()
    if i + 1 < len(text) and text[i + 1] in "@*#?0123456789":
        return "", i + 2
    return "$", i + 1


def _matching(text: str, start: int, opening: str, closing: str, file: str, line: int) -> int:
    depth = 0
    for j in range(start, len(text)):
        if text[j] == opening:
            depth += 1
        elif text[j] == closing:
            depth -= 1
            if depth == 0:
                return j
    raise ScenarioError(Problem(f"unclosed {opening!r} in a $ expression", file=file, line=line))


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _arithmetic(expression: str, variables: dict[str, str], file: str, line: int) -> int:
    """Bash integer arithmetic: + - * / % and parentheses over numbers and variables (bare or with $)."""
    text = _expand(expression, variables, file, line)
    text = _NAME.sub(lambda m: variables.get(m.group(0), "0") or "0", text)

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return int(_OPERATORS[type(node.op)](value(node.left), value(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(expression)

    try:
        return value(ast.parse(text, mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError):
        raise ScenarioError(Problem(f"cannot evaluate $(({expression}))", file=file, line=line)) from None
