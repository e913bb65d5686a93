"""The default server key of a stdio server: a readable name from the command that starts it.

The key is what the analysis tells servers apart by, so two different servers must not share one
and one server must keep its key across an upgrade (its era changing is what the analysis looks for).
A command's basename alone is not enough: fleets start many servers through the same launcher
(`docker run`, `uv run`, `npx`), so a launcher's key names what it launches, and leaves out the image
tag or package version an upgrade changes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

_INTERPRETER_VALUE_OPTIONS: Final = frozenset({"-m", "-jar", "--module"})
"""Options whose value names what an interpreter runs (`python -m pkg`, `java -jar app.jar`)."""
_SHELLS: Final = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"})
_CODE_OPTIONS: Final[dict[str, re.Pattern[str]]] = {
    **dict.fromkeys(_SHELLS, re.compile(r"-[A-Za-z]*c")),  # `-c`, and flags before it: `-lc`, `-ec`
    **dict.fromkeys(("node", "nodejs", "bun"), re.compile(r"-e|--eval|-p|--print")),
    **dict.fromkeys(("perl", "ruby"), re.compile(r"-[A-Za-z]*[eE]")),  # `-e`, `-pe`, `-ne`
    **dict.fromkeys(("pwsh", "powershell"), re.compile(r"(?i)-c|-command|-encodedcommand")),
    "php": re.compile(r"-r"),
}
"""Per interpreter, the options whose value is code to run (`bash -lc "…"`, `node -e`): the key names
the option, never the code (which may hold anything; `-c` of any command too)."""


@dataclass(frozen=True, slots=True)
class _Launcher:
    """How to find what a launcher runs in its command line.

    `subcommands`: the subcommand paths that launch (`run`, `container run`), each keyed by its
    first word as given; `takes_value(option)` says whether an option without `=` consumes the next
    argument; `unversioned` cuts the version off what is launched.
    """

    subcommands: tuple[tuple[str, ...], ...]
    takes_value: Callable[[str], bool]
    unversioned: Callable[[str], str]


# Container engines: every option takes a value except these flags (their CLI's own rule).
_CONTAINER_FLAGS: Final = frozenset(
    {
        "--rm", "--init", "--privileged", "--read-only", "--detach", "--interactive", "--tty",
        "--publish-all", "--no-healthcheck", "--oom-kill-disable", "--disable-content-trust", "--quiet",
        "--replace", "--rmi", "--read-only-tmpfs", "--env-host", "--http-proxy", "--no-hosts",
        "--debug", "--tls", "--tlsverify", "--sig-proxy",
    }
)  # fmt: skip
_CONTAINER_SHORT_FLAGS: Final = frozenset("dDitPq")
# Options of uv and the package runners that take a value; every other option is a flag.
_UV_VALUE_OPTIONS: Final = frozenset(
    {
        "--with", "--with-editable", "--with-requirements", "--directory", "--project", "--python", "-p",
        "--from", "--env-file", "--extra", "--group", "--only-group", "--package", "--index",
        "--index-url", "--default-index", "--extra-index-url", "--config-file", "--cache-dir", "-w",
    }
)  # fmt: skip
_NPM_VALUE_OPTIONS: Final = frozenset({"--package", "-p", "--call", "-c", "--workspace", "-w", "--prefix"})


def _container_takes_value(option: str) -> bool:
    if option.startswith("--"):
        return option not in _CONTAINER_FLAGS
    return not set(option[1:]) <= _CONTAINER_SHORT_FLAGS  # `-it` is two flags, `-e` takes a value


def _image(reference: str) -> str:
    """`registry:5000/name` of `registry:5000/name:tag@sha256:…`."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def _npm_package(spec: str) -> str:
    """`@scope/name` of `@scope/name@1.2.3`, `name` of `name@latest`."""
    at = spec.find("@", 1)
    return spec[:at] if at > 0 else spec


_PYTHON_VERSION_START: Final = re.compile(r"(?<=.)[=<>~!@]")


def _python_package(spec: str) -> str:
    """`name` of `name==1.2`, `name@1.2`, `name>=1` (the PEP 508 requirement's name and extras)."""
    found = _PYTHON_VERSION_START.search(spec)
    return spec[: found.start()] if found else spec


def _script(target: str) -> str:
    """A script path shortened to its basename (`_short`); a module specifier (`jsr:@a/b`,
    `https://…/mod.ts`) kept whole, its path being part of its name."""
    return target if ":" in target else _short(target)


def _short(arg: str) -> str:
    if arg.startswith("@") or "/" not in arg:
        return arg
    return os.path.basename(arg.rstrip("/")) or arg


_CONTAINER: Final = _Launcher(
    (("run",), ("container", "run"), ("exec",), ("container", "exec")), _container_takes_value, _image
)
_LAUNCHERS: Final[dict[str, _Launcher]] = {
    "docker": _CONTAINER,
    "podman": _CONTAINER,
    "nerdctl": _CONTAINER,
    "uv": _Launcher((("run",), ("tool", "run")), _UV_VALUE_OPTIONS.__contains__, _script),
    "uvx": _Launcher(((),), _UV_VALUE_OPTIONS.__contains__, _python_package),
    "pipx": _Launcher((("run",),), _UV_VALUE_OPTIONS.__contains__, _python_package),
    "npx": _Launcher(((),), _NPM_VALUE_OPTIONS.__contains__, _npm_package),
    "bunx": _Launcher(((),), _NPM_VALUE_OPTIONS.__contains__, _npm_package),
    "npm": _Launcher((("exec",),), _NPM_VALUE_OPTIONS.__contains__, _npm_package),
    "pnpm": _Launcher((("dlx",),), _NPM_VALUE_OPTIONS.__contains__, _npm_package),
    "yarn": _Launcher((("dlx",),), _NPM_VALUE_OPTIONS.__contains__, _npm_package),
    "deno": _Launcher((("run",),), lambda option: False, _script),
}
"""Launchers whose key is `<launcher> <subcommand> <what it runs>`. A subcommand in `exec`'s place
is kept as the user typed it, except `container run`, which is `run` (one command, two spellings)."""


def server_key(argv: Sequence[str]) -> str:
    """A stable, readable server key from a command line: the command's basename plus what it runs.

    What it runs is the value of `-m`/`--module`/`-jar`, else the first argument that is not an
    option; a path is shortened to its basename (`@scope/pkg` names stay whole). Code given on the
    command line is not included, only its option (`python -c`, `bash -lc`, `node -e`: `_CODE_OPTIONS`;
    give such servers a `--server` name to tell them apart). Examples: `python -m weather` → `python
    -m weather`; `/usr/bin/node build/index.js --port 3` → `node index.js`; `mcp-server-git` →
    `mcp-server-git`.

    A launcher names what it launches, without the version: `docker run -i --rm -e TOKEN
    mcp/github:1.4` → `docker run mcp/github`; `uv --directory /srv run weather.py` → `uv run
    weather.py`; `npx -y @modelcontextprotocol/server-everything@2025.7.1` → `npx
    @modelcontextprotocol/server-everything`; `uvx mcp-server-git==0.6` → `uvx mcp-server-git`.
    Pass the redacted argv so no secret can end up in a key or a file name.
    """
    if not argv:
        return "server"
    base = os.path.basename(argv[0].rstrip("/")) or argv[0]
    args = list(argv[1:])
    launcher = _LAUNCHERS.get(base)
    if launcher is not None:
        return _launcher_key(base, launcher, args)
    for i, arg in enumerate(args):
        if arg in _INTERPRETER_VALUE_OPTIONS:
            if i + 1 < len(args):
                return f"{base} {arg} {_short(args[i + 1])}" if arg == "-m" else f"{base} {_short(args[i + 1])}"
            break
        code = _CODE_OPTIONS.get(base)
        if arg == "-c" or (code is not None and code.fullmatch(arg)):
            return f"{base} {arg}"
        if arg.startswith("-") or not arg:
            continue
        return f"{base} {_short(arg)}"
    return base


def _launcher_key(base: str, launcher: _Launcher, args: list[str]) -> str:
    words = _positionals(args, launcher.takes_value)
    for path in launcher.subcommands:
        if tuple(words[: len(path)]) == path:
            named = " ".join(p for p in path if p != "container")
            target = words[len(path)] if len(words) > len(path) else None
            head = f"{base} {named}" if named else base
            return head if target is None else f"{head} {launcher.unversioned(target)}"
    # Another subcommand (`docker ps`) or none: the first word, like any other command.
    return f"{base} {_short(words[0])}" if words else base


def _positionals(args: list[str], takes_value: Callable[[str], bool]) -> list[str]:
    """The arguments up to and including the first one after the subcommand path that is not an
    option or an option's value; `--` ends the options."""
    words: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            words.extend(args[i : i + 1])
            break
        if arg.startswith("-") and arg != "-":
            if "=" not in arg and takes_value(arg):
                i += 1
            continue
        if arg:
            words.append(arg)
        if len(words) == 3:  # the longest subcommand path is two words, then what it runs
            break
    return words
