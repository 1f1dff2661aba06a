"""JSON with comments and trailing commas, as VS Code reads `.vscode/launch.json` and
`settings.json`. Objects remember their line, so that a caller can point at one."""

from __future__ import annotations

import re
from typing import Any

from ..errors import Location, MemlensError


class JsonObject(dict):
    """A parsed JSON object that remembers the 1-based line of its opening brace."""

    line: int = 0


class _JsoncParser:
    _NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
    _ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                "t": "\t"}

    def __init__(self, text: str, name: str):
        self.text, self.name, self.i = text, name, 0
        self.depth = 0

    def error(self, message: str) -> MemlensError:
        line = self.text.count("\n", 0, self.i) + 1
        return MemlensError(f"invalid JSON: {message}", Location(self.name, line))

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.i < n:
            ch = text[self.i]
            if ch in " \t\r\n\ufeff":
                self.i += 1
            elif text.startswith("//", self.i):
                end = text.find("\n", self.i)
                self.i = n if end < 0 else end + 1
            elif text.startswith("/*", self.i):
                end = text.find("*/", self.i + 2)
                if end < 0:
                    raise self.error("unterminated comment")
                self.i = end + 2
            else:
                return

    def value(self) -> Any:
        self.skip()
        if self.i >= len(self.text):
            raise self.error("unexpected end of file")
        ch = self.text[self.i]
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.array()
        if ch == '"':
            return self.string()
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.i):
                self.i += len(word)
                return val
        m = self._NUMBER.match(self.text, self.i)
        if m:
            self.i = m.end()
            s = m.group()
            return float(s) if any(c in s for c in ".eE") else int(s)
        raise self.error(f"unexpected character {ch!r}")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > 200:
            raise self.error("nested too deeply")

    def obj(self) -> JsonObject:
        self._enter()
        out = JsonObject()
        out.line = self.text.count("\n", 0, self.i) + 1
        self.i += 1
        while True:
            self.skip()
            if self.text.startswith("}", self.i):
                self.i += 1
                self.depth -= 1
                return out
            if not self.text.startswith('"', self.i):
                raise self.error("expected a property name in double quotes")
            key = self.string()
            self.skip()
            if not self.text.startswith(":", self.i):
                raise self.error("expected ':'")
            self.i += 1
            out[key] = self.value()
            self.skip()
            if self.text.startswith(",", self.i):
                self.i += 1
            elif not self.text.startswith("}", self.i):
                raise self.error("expected ',' or '}'")

    def array(self) -> list[Any]:
        self._enter()
        out: list[Any] = []
        self.i += 1
        while True:
            self.skip()
            if self.text.startswith("]", self.i):
                self.i += 1
                self.depth -= 1
                return out
            out.append(self.value())
            self.skip()
            if self.text.startswith(",", self.i):
                self.i += 1
            elif not self.text.startswith("]", self.i):
                raise self.error("expected ',' or ']'")

    def string(self) -> str:
        text, n = self.text, len(self.text)
        self.i += 1
        parts: list[str] = []
        start = self.i
        while True:
            if self.i >= n:
                raise self.error("unterminated string")
            ch = text[self.i]
            if ch == '"':
                parts.append(text[start:self.i])
                self.i += 1
                return "".join(parts)
            if ch == "\\":
                parts.append(text[start:self.i])
                esc = text[self.i + 1:self.i + 2]
                if esc == "u":
                    try:
                        parts.append(chr(int(text[self.i + 2:self.i + 6], 16)))
                    except ValueError:
                        raise self.error("bad \\u escape") from None
                    self.i += 6
                elif esc in self._ESCAPES:
                    parts.append(self._ESCAPES[esc])
                    self.i += 2
                else:
                    raise self.error(f"bad escape \\{esc}")
                start = self.i
            elif ch == "\n":
                raise self.error("newline inside a string")
            else:
                self.i += 1


def parse_jsonc(text: str, name: str = "<json>") -> Any:
    """Parse JSON that may hold // and /* */ comments and trailing commas. Objects come back as
    JsonObject (a dict with the line of its opening brace). Raises MemlensError with the line."""
    p = _JsoncParser(text, name)
    value = p.value()
    p.skip()
    if p.i != len(text):
        raise p.error("unexpected text after the value")
    return value
