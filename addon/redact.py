"""Redaction: credentials never reach a capture in the clear.

Secrets are replaced by a keyed hash prefix (`hmac:<12 hex>`), so equal values still correlate
across records and captures without being recoverable. The key is `$ERASCOPE_REDACT_KEY` when set
(share it across hosts to correlate fleet-wide), else a random key created once, mode 0600, under
the erascope state directory.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import re
import secrets
import shlex
import tempfile
from bisect import bisect_left
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import Final
from urllib.parse import quote, unquote_plus, unquote_to_bytes

import orjson

from addon.errors import ErascopeError

HASH_PREFIX: Final = "hmac:"

_SECRET_WORDS: Final = (
    r"token|secret|passw(?:or)?d|passphrase|pwd|api[-_.]?key|apikey|access[-_.]?key|account[-_.]?key|private[-_.]?key"
    r"|auth|credential|bearer|jwt|(?:^|[-_.])pat(?:$|[-_.])|(?:^|[-_.])key$|(?:^|[-_.])cookies?$"
    # `pass` and `pw` only as the whole name or its last part (`--pass`, `MYSQL_PASS`, `--db-pw`, openssl's
    # `-passin`/`-passout`): inside other words they are no secret (`--compass`, `--bypass-cache`, `--pwm`)
    r"|(?:^|[-_.])pass(?:in|out)?$|(?:^|[-_.])pw$"
    # a session handle (`--session X`, `--session-id X`, `SESSION_ID=X`), hashed as session headers are
    r"|(?:^|[-_.])session(?:[-_.]?id)?$"
    # a wallet's recovery words, credentials in short, cloud vendors' secret key beside their access key (`*_SK`)
    r"|mnemonic|seed[-_.]?phrase|(?:^|[-_.])creds$|(?:^|[-_.])sk$"
)
_SECRET_NAME = re.compile(f"(?i)(?:{_SECRET_WORDS})")
"""An option or variable name that holds a secret: `--token`, `--api-key`, `--pat`, `--pass`, `GITHUB_TOKEN`, …"""
SECRET_SHORT_FLAGS: Final = frozenset({"-k"})
"""Short options whose value is a secret (`-k KEY`); long ones are recognised by name."""
_PASSWORD: Final = "password"
"""A program's option whose value is a password: the next argument, or attached (`sshpass -pX`)."""
_ATTACHED_PASSWORD: Final = "attached password"
"""A password only when attached (`mysql -pX`): alone the option prompts, and the next argument is
no password (`mysql -p app` names the database)."""
_USER_PASSWORD: Final = "user:password"
"""A value `user:password` whose password is hashed, the user kept (`curl -u alice:X`)."""
_MYSQL_OPTIONS: Final = {"-p": _ATTACHED_PASSWORD}
_MONGO_OPTIONS: Final = {"-p": _PASSWORD}
_UPPER_P_OPTIONS: Final = {"-P": _PASSWORD}
_LDAP_OPTIONS: Final = {"-w": _PASSWORD}
_PROGRAM_OPTIONS: Final[dict[str, dict[str, str]]] = {
    "curl": dict.fromkeys(("-u", "--user", "-U", "--proxy-user"), _USER_PASSWORD),
    **dict.fromkeys(
        ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlslap", "mariadb",
         "mariadb-dump", "mariadb-admin"),
        _MYSQL_OPTIONS,
    ),
    **dict.fromkeys(("mongosh", "mongo", "mongodump", "mongorestore", "mongoexport", "mongoimport"), _MONGO_OPTIONS),
    "sshpass": {"-p": _PASSWORD},
    "redis-cli": {"-a": _PASSWORD},
    **dict.fromkeys(("sqlcmd", "bcp", "mosquitto_pub", "mosquitto_sub"), _UPPER_P_OPTIONS),
    **dict.fromkeys(("ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldapwhoami", "ldappasswd"), _LDAP_OPTIONS),
}  # fmt: skip
"""Per program, options that hold a password under a name that says nothing (`-u`, `-p`, `-a`: in
other programs a user id, a port, a flag). They apply from the program's name on, wherever it
stands in the command line (`docker exec db mysqldump -pX`, `sh -c "mysql -pX"`)."""
_RUNS_COMMAND: Final = frozenset({"sshpass"})
"""Programs whose first other word starts the command they run, with options of its own (`sshpass
-p X ssh -p 22 h`)."""
_OPTION_VALUE = re.compile(r"^(--?[A-Za-z0-9/][\w.:/-]*)=(.*)$", re.S)
"""`--name=value`; the name may be a URL's (npm's `--//registry.example/:_authToken=X`)."""
_NAME_VALUE = re.compile(r"^((?:\$[Ee][Nn][Vv]:)?[A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.S)
"""`NAME=value`, or PowerShell's `$env:NAME=value`."""
_QUOTED_PAIR = re.compile(r'(?<![\w.-])([A-Za-z_][\w.-]*)([ \t]*=[ \t]*)"((?:[^"\\]|\\.)*)"')
"""A quoted `name="value"` option inside a value (Kafka's JAAS `… required username="u" password="X";`)."""
_ORACLE = re.compile(
    r"""(?:(?<=jdbc:oracle:thin:)|(?<=jdbc:oracle:oci:)|(?<![^\s='"]))([A-Za-z_][\w$#]*)/([^\s@/]+)@(?=//|\(|[\w.-]+:\d+/)"""
)
"""Oracle's `user/password@//host:1521/service` (or `@host:1521/…`, `@(DESCRIPTION=…)`), alone or in a JDBC URL."""
_COMMA_PAIR = re.compile(r",(?=[A-Za-z_][A-Za-z0-9_.-]*=)")
"""Where `NAME=value,NAME=value` (`gcloud --set-env-vars`) starts its next pair (a value may hold a comma)."""
_GO_DSN = re.compile(r"""(?<![^\s='"])([^\s:@/='"]*):(\S*)@(?=(?:tcp6?|udp|unix)\()""")
"""Go's MySQL driver's data source name, `user:password@tcp(host:3306)/db`: no scheme, so no URL."""
_HEADER_NAME_CHARS: Final = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
"""An HTTP header name (RFC 9110's token)."""
_HEADER_SHAPED = re.compile(rf"^({_HEADER_NAME_CHARS}):[ \t]*(.*)$", re.S)
_AUTHORITY_END = re.compile(r"[/?#\s]")
"""Where a URL's authority (`userinfo@host:port`) ends."""
_USERINFO_END = re.compile(r"[/\s]")
"""Where a password holding `?` or `#` can end at the latest (`user:Tr0ub#dor@db/app`)."""
_SCHEME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_HEADER_OPTION = re.compile(r"(?i)^(?:-H|--?[\w-]*headers?)$")
"""An option taking a header (`-H`, `--header`, `--add-header`): it may give the name and the value in two arguments."""
_HEADER_NAME = re.compile(rf"^{_HEADER_NAME_CHARS}$")
_PAIR_NAME = re.compile(r"\s*[A-Za-z_][\w .:-]*")
"""A name in a `;`-separated list of pairs: connection strings have spaces (`User ID`) and colons
(`Jet OLEDB:Database Password`) in theirs; a URL or a path is no name."""
_PAIR_QUOTES: Final = {"{": "}", '"': '"', "'": "'"}
"""How a connection string's value holds a `;`: braced (ODBC, `}}` for a `}`) or quoted (ADO.NET, doubled)."""
_TOKEN_SHAPE_LIST: Final = (
    r"gh[pousr]_[A-Za-z0-9]{36,}",  # GitHub tokens: 36 base62 characters after the prefix
    r"github_pat_[A-Za-z0-9_]{80,}",  # GitHub fine-grained tokens: 22 + `_` + 59
    r"sk-ant-[A-Za-z0-9_-]{32,}",  # Anthropic: sk-ant-api03-…, about 100 characters
    r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{32,}",  # OpenAI project, service account and admin keys
    r"sk-[A-Za-z0-9]{32,}",  # OpenAI's older keys (48 letters and digits) and vendors copying them
    r"sk-(?:or-v1|ak|lf)-[A-Za-z0-9-]{20,}",  # OpenRouter, Zapier, Langfuse
    r"xox[abcdeoprs]-[0-9]+-[A-Za-z0-9-]{10,}",  # Slack: xoxb-<team>-<bot>-<secret>, xoxp-, a browser's xoxc-
    r"xapp-[0-9]-[A-Za-z0-9]+-[0-9]+-[A-Za-z0-9]{10,}",  # Slack app-level tokens
    r"gl(?:pat|ptt|dt|rt|soat|ft|cbt)-[A-Za-z0-9_-]{20,}",  # GitLab: personal, trigger, deploy, runner, … tokens
    r"AKIA[A-Z0-9]{16}",  # AWS access key ids: exactly 20 upper-case letters and digits
    r"ASIA[A-Z0-9]{16}",  # AWS temporary access key ids
    r"AIza[A-Za-z0-9_-]{35}",  # Google API keys: exactly 39 characters
    r"ya29\.[A-Za-z0-9_-]{30,}",  # Google OAuth access tokens
    r"GOCSPX-[A-Za-z0-9_-]{24,}",  # Google OAuth client secrets
    r"sk_(?:live|test)_[A-Za-z0-9]{20,}",  # Stripe secret keys
    r"rk_(?:live|test)_[A-Za-z0-9]{20,}",  # Stripe restricted keys
    r"whsec_[A-Za-z0-9+=]{24,}",  # Stripe webhook secrets
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"npm_[A-Za-z0-9]{36,}",  # npm
    r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",  # PyPI (a macaroon for pypi.org)
    r"SG\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{40,}",  # SendGrid
    r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}",  # Shopify
    r"ATATT3[A-Za-z0-9_=-]{40,}",  # Atlassian API tokens
    r"ntn_[A-Za-z0-9]{40,}",  # Notion
    r"secret_[A-Za-z0-9]{40,}",  # Notion's older integration tokens
    r"lin_api_[A-Za-z0-9]{32,}",  # Linear
    r"gsk_[A-Za-z0-9]{40,}",  # Groq
    r"pplx-[A-Za-z0-9]{40,}",  # Perplexity
    r"xai-[A-Za-z0-9]{40,}",  # xAI
    r"tvly-[A-Za-z0-9-]{20,}",  # Tavily
    r"r8_[A-Za-z0-9]{32,}",  # Replicate
    r"pcsk_[A-Za-z0-9_]{40,}",  # Pinecone
    r"sbp_[a-f0-9]{40,}",  # Supabase access tokens
    r"sb_secret_[A-Za-z0-9_-]{20,}",  # Supabase secret keys
    r"dop_v1_[a-f0-9]{40,}",  # DigitalOcean
    r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}",  # Postman
    r"figd_[A-Za-z0-9_-]{40,}",  # Figma
    r"dapi[a-f0-9]{32}(?:-[0-9])?",  # Databricks
    r"hvs\.[A-Za-z0-9_-]{24,}",  # HashiCorp Vault service tokens
    r"dckr_pat_[A-Za-z0-9_-]{20,}",  # Docker Hub
    r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{6,}",  # LangSmith
    r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}",  # Grafana service accounts
    r"sntry[su]_[A-Za-z0-9+=_-]{40,}",  # Sentry
    r"NRAK-[A-Z0-9]{24,}",  # New Relic
    # a PEM private key (a service account's, given as an argument), BEGIN to END
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    # a JWT: base64url JSON header and payload (`{"` is `eyJ`) and a signature, dot-separated
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
)
"""Well-known credentials: each a documented prefix and the length and characters of real tokens."""


def _by_first_character(shapes: tuple[str, ...]) -> str:
    """`shapes` as one alternation per first character (`s(?:k-ant-…|k-…|ecret_…)`), each in its order.

    Searching a URL for them is on the proxy's path for every request: an alternation whose branches
    each start with a character of its own is searched by skipping to where one of those characters
    stands, and tries one branch there instead of every shape in turn (about half the time of the
    shapes side by side, for forty of them)."""
    groups: dict[str, list[str]] = {}
    for shape in shapes:
        groups.setdefault(shape[0], []).append(shape[1:])
    return "|".join(f"{re.escape(first)}(?:{'|'.join(rest)})" for first, rest in groups.items())


_TOKEN_SHAPES: Final = _by_first_character(_TOKEN_SHAPE_LIST)
_TOKEN = re.compile(rf"(?<![A-Za-z0-9_-])(?:{_TOKEN_SHAPES})(?![A-Za-z0-9_-])")
"""A well-known credential standing on its own, anywhere in an argument (`Bearer ghp_…`,
`--config={"token":"ghp_…"}`). Each is a documented prefix *and* the length and characters of real
tokens, and cannot be part of a longer word: `sk-learn`, `sk-notes.txt` or `ghp_cache` are not tokens."""
_URL_PART_TOKEN = re.compile(
    rf"(?:(?<![A-Za-z0-9_-])|(?<=%[0-9A-Fa-f]{{2}}))(?:{_TOKEN_SHAPES})(?![A-Za-z0-9_-])"
)
"""`_TOKEN` in a URL: an escape (`/mcp%2Fghp_…`) ends the word before it too."""
_TOKEN_SHAPE = re.compile(f"(?:{_TOKEN_SHAPES})")
"""A token's shape without its bounds, to tell quickly that a text holds none (the common case): its
search skips ahead to the characters a token can start with, which the bounds `_URL_PART_TOKEN`
checks first at every character keep it from doing (several times slower on a URL); a header
value's last word is matched with it whole (`HttpRedaction.header_value`)."""


def _token_prefixes() -> dict[str, tuple[str, ...]]:
    prefixes: dict[str, tuple[str, ...]] = {}
    for shape in _TOKEN_SHAPE_LIST:
        literal = re.match(r"[A-Za-z0-9_ -]+", shape)
        if literal is None:  # a shape starting otherwise would never be tried in a header
            raise ValueError(f"a well-known credential's shape must start with its literal prefix: {shape}")
        first = literal.group()[0]
        prefixes[first] = (*prefixes.get(first, ()), literal.group())
    return prefixes


_TOKEN_PREFIXES: Final = _token_prefixes()
"""What the well-known credentials start with, literally (`gh`, `sk-ant-`, `AKIA`, `eyJ`), by their
first character: a word is tried against the two or three of its own first character with
`str.startswith` (C, no regular expression; all forty-four at once cost 0.4 µs) before the shapes."""
_TOKEN_MIN: Final = 17
"""The shortest well-known credential (Slack's `xoxb-1-` and ten characters; AWS key ids are 20)."""
_ASCII_ESCAPE = re.compile(r"%[0-7][0-9A-Fa-f]")
"""A `%XX` escape of an ASCII character: the only ones a token (ASCII throughout) can be spelled with."""


def _sub_url_tokens(text: str, replace: Callable[[str], str]) -> str:
    """`text` (a URL or a part of one) with each well-known credential in it (`_URL_PART_TOKEN`)
    replaced by `replace(token)`, written plainly or with characters percent-encoded.

    A server decodes `%XX` before it reads a path or a query value, so `/api/ghp%5F…` and
    `/api/%67hp_…` carry the token `ghp_…`: such a token is found in the text decoded once, and the
    whole of its encoded spelling is replaced by `replace` of the decoded token, which is what the
    plain spelling gives (the rest of `text` stays as it came). Decoding only when a `%` is there
    keeps this off the common path."""
    if "%" in text:
        text = _sub_encoded_tokens(text, replace)
    elif not _TOKEN_SHAPE.search(text):
        return text
    return _URL_PART_TOKEN.sub(lambda m: replace(m.group()), text)


def _sub_encoded_tokens(text: str, replace: Callable[[str], str]) -> str:
    decoded = _ASCII_ESCAPE.sub(lambda m: chr(int(m.group()[1:], 16)), text)
    if decoded == text or not _TOKEN_SHAPE.search(decoded):
        return text
    # where each escape's character stands in `decoded`: every escape before it is two characters shorter
    escapes = [m.start() - 2 * i for i, m in enumerate(_ASCII_ESCAPE.finditer(text))]
    out: list[str] = []
    done = 0
    for m in _URL_PART_TOKEN.finditer(decoded):
        start = m.start() + 2 * bisect_left(escapes, m.start())
        end = m.end() + 2 * bisect_left(escapes, m.end())
        out.append(text[done:start])
        out.append(replace(m.group()))
        done = end
    out.append(text[done:])
    return "".join(out)


def _key_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "erascope" / "redact.key"


def load_key() -> bytes:
    """The redaction key: `$ERASCOPE_REDACT_KEY`, else a per-host key file created on first use.

    `ErascopeError` for a key file found empty: hashing with an empty key would hide nothing.
    """
    env = os.environ.get("ERASCOPE_REDACT_KEY")
    if env:
        return env.encode()
    path = _key_path()
    try:
        made = None if path.exists() else _make_key(path)
        if made is not None:
            return made
        key = path.read_bytes().strip()
    except OSError:
        return secrets.token_hex(32).encode()  # unreadable: correlate within this run only
    if not key:
        raise ErascopeError(
            f"the redaction key file {path} is empty: remove it (a new key is made) or set $ERASCOPE_REDACT_KEY"
        )
    return key


def _make_key(path: Path) -> bytes | None:
    """A new key put in `path`; None when another recorder put one there first.

    The key is written to a file of its own and linked into place, which never replaces: a recorder
    starting at the same moment finds no key file or a whole one, never one made but not yet written.
    """
    key = secrets.token_hex(32).encode()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".redact.key.")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        os.link(tmp, path)
    except FileExistsError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return key


class Redactor:
    """Keyed hashing of secret values."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else load_key()

    def hash(self, value: str | bytes) -> str:
        data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        return HASH_PREFIX + hmac.new(self._key, data, hashlib.sha256).hexdigest()[:12]

    def argv(self, argv: list[str]) -> list[str]:
        """`redact_argv(argv, self)`."""
        return redact_argv(argv, self)


def redact_argv(argv: list[str], redactor: Redactor) -> list[str]:
    """A command line as it may be recorded: every credential in it replaced by `hmac:<12 hex>`.

    Hashed: the value of a secret-named option (`--token=X`, `--api-key X`, `--pat X`, `--pass X`,
    `--access-key=X`, `-k X`); the value of a `NAME=VALUE` pair whose name looks secret
    (`-e GITHUB_TOKEN=X`, `--env=DB_PASSWORD=X`), also among `;`-separated pairs (connection
    strings: `Server=h;Password=X`, `Pwd={X}`) and `&`-separated ones (`user=u&password=X`); the
    credential of a secret header, in one argument or two (`--header "Authorization: Bearer X"`,
    `-H Authorization "Bearer X"` keep `Bearer`); the password (or the lone user, often a token) of
    a URL's userinfo (`postgresql://user:X@host`) and secret query values of a URL (`?token=X`); a
    well-known token anywhere (`ghp_…`, `sk-proj-…`, `xoxb-…`, `AKIA…`, see `_TOKEN`). A base64 JSON
    object holding a credential (a hosted server's configuration, `--config eyJ…`) is hashed whole, as
    an argument, an option's value or a variable's (`-e SMITHERY_CONFIG=eyJ…`). The program
    (`argv[0]`) and everything else stays, one output argument per input argument. Equal secrets
    give equal hashes.
    """
    http = HttpRedaction(redactor)
    out: list[str] = []
    hide_next = False
    user_next = False
    header_next: str | None = None
    program: str | None = None
    options: dict[str, str] = {}  # the password options of the program named last
    for i, arg in enumerate(argv):
        header, header_next = header_next, None  # a secret header named by the argument before
        if not hide_next and not user_next and arg[:1] != "-":
            program, options = _program_named(arg, program, options)
        if i == 0:
            out.append(arg)
        elif hide_next:
            out.append(redactor.hash(arg))
            hide_next = False
        elif user_next:
            out.append(_user_password(arg, redactor))
            user_next = False
        elif header is not None:
            out.append(http.header_value(header, arg))
        elif options and (kind := options.get(arg)) in (_PASSWORD, _USER_PASSWORD):
            out.append(arg)
            hide_next, user_next = kind == _PASSWORD, kind == _USER_PASSWORD
        elif options and (shown := _program_option_value(arg, options, redactor)) is not None:
            out.append(shown)
        elif m := _OPTION_VALUE.match(arg):
            flag, value = m.groups()
            secret = _SECRET_NAME.search(flag.lstrip("-"))
            out.append(f"{flag}={redactor.hash(value) if secret else _redact_value(value, redactor)}")
            header_next = _secret_header_named(flag, value, http)
        elif arg in SECRET_SHORT_FLAGS or (
            # one holding a space is an option and its value in one argument (`"--api-key X"`): below
            arg.startswith("-")
            and len(arg) > 2
            and "=" not in arg
            and _SECRET_NAME.search(arg)
            and not _SPACE.search(arg)
        ):
            out.append(arg)
            hide_next = True
        else:
            out.append(_redact_value(arg, redactor))
            header_next = _secret_header_named(argv[i - 1], arg, http)
    # a token is recognised by its shape wherever it stands, whatever the rules above made of the rest
    return out[:1] + [_TOKEN.sub(lambda m: redactor.hash(m.group()), arg) for arg in out[1:]]


def _program_named(arg: str, program: str | None, options: dict[str, str]) -> tuple[str | None, dict[str, str]]:
    """The program whose password options apply after `arg`, and those options."""
    name = os.path.basename(arg)
    if name in _PROGRAM_OPTIONS:
        return name, _PROGRAM_OPTIONS[name]
    if program in _RUNS_COMMAND:
        return None, {}
    return program, options


def _program_option_value(arg: str, options: dict[str, str], redactor: Redactor) -> str | None:
    """`arg` with its password hashed when it is one of the program's password options with its value
    attached (`-pX`, `-ualice:X`, `--user=alice:X`); else None."""
    flag, eq, value = arg.partition("=")
    if not eq or not flag.startswith("--"):
        flag, value = arg[:2], arg[2:]
        if arg[:1] != "-" or arg[1:2] == "-" or not value:
            return None
    kind = options.get(flag)
    if kind is None:
        return None
    shown = _user_password(value, redactor) if kind == _USER_PASSWORD else redactor.hash(value)
    return f"{flag}{eq}{shown}"


def _user_password(value: str, redactor: Redactor) -> str:
    """`user:password` with the password hashed; a user alone (the program asks for the password) kept."""
    user, colon, password = value.partition(":")
    return f"{user}:{redactor.hash(password)}" if colon else value


def _secret_header_named(option: str, name: str, http: HttpRedaction) -> str | None:
    """`name` when `option name` gives a secret header whose value is the next argument
    (`-H Authorization "Bearer X"`, `--header=X-Api-Key X`); else None."""
    if _HEADER_OPTION.match(option) and _HEADER_NAME.match(name) and http.hides_header(name):
        return name
    return None


def _redact_value(value: str, redactor: Redactor) -> str:
    """One argument (or an option's value) with the credentials it carries hashed."""
    if _is_base64_json_secret(value, redactor):
        # before the pair: padded base64 reads as one (`eyJ…fQ==` is `eyJ…fQ=` and `=`)
        return redactor.hash(value)
    pair = _NAME_VALUE.match(value)
    if pair and (_SECRET_NAME.search(pair.group(1)) or _is_base64_json_secret(pair.group(2), redactor)):
        # the whole value, `;` and `&` included: `DB_PASSWORD=a;b&c` is one password
        return f"{pair.group(1)}={redactor.hash(pair.group(2))}"
    if value[:1] == "{" and (as_json := _redact_json_argument(value, redactor)) is not None:
        return as_json
    if pair and pair.group(2)[:1] == "{" and (as_json := _redact_json_argument(pair.group(2), redactor)) is not None:
        return f"{pair.group(1)}={as_json}"  # `-e 'HEADERS={"Authorization": …}'`, as vendors document
    if pair and (field := _HEADER_SHAPED.match(pair.group(2))):  # `http.extraHeader=Authorization: Bearer X`
        shown = HttpRedaction(redactor).header_value(field.group(1), field.group(2))
        if shown != field.group(2):
            return f"{pair.group(1)}={field.group(1)}: {shown}"
    if "@" in value:
        if _GO_DSN.search(value):
            value = _GO_DSN.sub(lambda m: f"{m.group(1)}:{redactor.hash(m.group(2))}@", value)
        if "/" in value and _ORACLE.search(value):
            value = _ORACLE.sub(lambda m: f"{m.group(1)}/{redactor.hash(m.group(2))}@", value)
    if '"' in value and "=" in value:
        value = _QUOTED_PAIR.sub(lambda m: _hash_quoted_pair(m, redactor), value)
    if m := _HEADER_SHAPED.match(value):
        name, val = m.groups()
        redacted = HttpRedaction(redactor).header_value(name, val)
        if redacted != val:
            return f"{name}: {redacted}"
    spaced = _SPACE.search(value) is not None
    if ";" in value and "=" in value:
        # before the URL: `jdbc:sqlserver://h;password=X` puts pairs where a URL has its host
        redacted, listed = _redact_pairs(value, redactor)
        if listed or not spaced:
            # a connection string's spaces are inside its names (`User ID`): no command line
            value, spaced = redacted, False
    if spaced:
        return _redact_command_text(value, redactor)
    if "://" in value:
        return HttpRedaction(redactor).url(value)
    if pair and "," in value:
        value = ",".join(_hash_secret_pair(part, redactor) for part in _COMMA_PAIR.split(value))
    if pair and "&" in value:
        return _redact_query(redactor, value, _is_secret_pair_name)
    return value


def _hash_quoted_pair(m: re.Match[str], redactor: Redactor) -> str:
    """A `_QUOTED_PAIR` match with its value hashed when its name is a secret's."""
    name, equals, value = m.groups()
    return f'{name}{equals}"{redactor.hash(value)}"' if _is_secret_pair_name(name) else m.group()


def _hash_secret_pair(text: str, redactor: Redactor) -> str:
    """`NAME=value` with the value hashed when the name is a secret's or the value base64 JSON holding
    a credential (`_is_base64_json_secret`); anything else as it is."""
    pair = _NAME_VALUE.match(text)
    if pair and (_SECRET_NAME.search(pair.group(1)) or _is_base64_json_secret(pair.group(2), redactor)):
        return f"{pair.group(1)}={redactor.hash(pair.group(2))}"
    return text


_SPACE = re.compile(r"\s")
_SHELL_WORD = re.compile(r"""(?:[^\s"'\\]|\\.|"(?:[^"\\]|\\.)*"|'[^']*')+""", re.S)
"""A word of a POSIX shell command line, quotes and backslash escapes included."""


def _redact_command_text(text: str, redactor: Redactor) -> str:
    """An argument holding a command line (`sh -c "srv --token X"`, `node -e`, a launcher's string,
    `"--api-key X"` as one argument): its words redacted as the arguments of a command line are,
    each in its place (quoted for the shell where it changed); the rest of the text as it is (spaces,
    `&&`, `;`). A quoted word holding a command line again is redacted the same way, one level less."""
    spans = list(_SHELL_WORD.finditer(text))
    words = [_unquoted_word(m.group()) for m in spans]
    redacted = redact_argv(["", *words], redactor)[1:]
    out: list[str] = []
    last = 0
    for m, word, shown in zip(spans, words, redacted, strict=True):
        out.append(text[last : m.start()])
        out.append(m.group() if shown == word else shlex.quote(shown))
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def _unquoted_word(word: str) -> str:
    """A shell word as the command it runs receives it (`'a b'` → `a b`)."""
    try:
        return "".join(shlex.split(word, posix=True)) or word
    except ValueError:  # a backslash at the very end
        return word


def _hash_secret_fields(
    doc: object, redactor: Redactor, secret: Callable[[str], bool], *, base64_json: bool = False
) -> bool:
    """Hash, in place, the values of the fields of `doc`'s objects (at any depth) whose names are
    `secret`, and with `base64_json` every other string (a field's of any name, an array's item) that
    is base64 JSON holding a credential (`_base64_json_holds_secret`), whole as in a query value;
    whether any was. Such strings are read up to `_BASE64_JSON_READ_MAX` characters in all, as one
    query value is: past that, one starting as base64 JSON does is hashed unread, as a longer value
    is (a body of many configurations held the proxy's event loop for a fifth of a second a 60 KiB)."""
    found = False
    budget = _BASE64_JSON_READ_MAX
    nodes = [doc]
    while nodes:
        node = nodes.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(key, str) and secret(key) and value is not None:
                node[key] = redactor.hash(value if isinstance(value, str) else orjson.dumps(value))  # type: ignore[index]
                found = True
            elif isinstance(value, dict | list):
                nodes.append(value)
            elif base64_json and isinstance(value, str) and _starts_as_base64_json(value):
                if _base64_json_holds_secret(value, redactor, read_max=budget):
                    node[key] = redactor.hash(value)  # type: ignore[index]
                    found = True
                budget = max(0, budget - len(value))
    return found


def _redact_json_argument(value: str, redactor: Redactor) -> str | None:
    """A JSON object given as an argument (`--config '{"apiKey": …}'`, a host's `--mcp-config`) with its
    secret-named fields hashed, and every other string in it redacted as an argument is (a server's
    URL, a connection string), every list of strings as a command line (a server's `args`), as
    compact JSON; None when it is no JSON object or holds nothing to hide."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    hashed = _hash_secret_fields(doc, redactor, _is_secret_pair_name)
    if not _redact_json_strings(doc, redactor) and not hashed:
        return None
    return orjson.dumps(doc).decode()


def _redact_json_strings(doc: dict[str, object] | list[object], redactor: Redactor) -> bool:
    """Redact, in place, the strings of `doc` at any depth (`_redact_json_argument`); whether any changed."""
    changed = False
    nodes: list[object] = [doc]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list) and node and all(isinstance(item, str) for item in node):
            shown = redact_argv(["", *node], redactor)[1:]
            changed = changed or shown != node
            node[:] = shown
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, item in list(items):
            if isinstance(item, str) and not item.startswith(HASH_PREFIX):
                shown_item = _TOKEN.sub(lambda m: redactor.hash(m.group()), _redact_value(item, redactor))
                if shown_item != item:
                    node[key] = shown_item  # type: ignore[index]
                    changed = True
            elif isinstance(item, dict | list):
                nodes.append(item)
    return changed


def _is_secret_pair_name(name: str) -> bool:
    """Whether a pair's value is a credential: a secret-looking name, or a secret query parameter's."""
    return bool(_SECRET_NAME.search(name)) or is_secret_query_param(name)


def _redact_pairs(text: str, redactor: Redactor) -> tuple[str, bool]:
    """`text` with the value of every secret-named `NAME=VALUE` among its `;`-separated parts hashed,
    and whether every part is such a pair (a connection string, not a command line holding a `;`).

    Connection strings (ODBC and ADO.NET `Server=h;User ID=u;Password=X`, JDBC's
    `jdbc:sqlserver://h;password=X`) are such lists. A braced or quoted value (`Pwd={a;b}`,
    `Password="a;b"`) may hold a `;` and is hashed as one, without its braces or quotes, so it
    hashes as the same secret given anywhere else; so is a value of any name that is base64 JSON
    holding a credential (`_is_base64_json_secret`). Other parts stay as they are.
    """
    out: list[str] = []
    listed = True
    start = 0
    while start <= len(text):
        end = _pair_end(text, start)
        part = text[start:end]
        name, eq, value = part.partition("=")
        paired = bool(eq) and bool(_PAIR_NAME.fullmatch(name))
        listed = listed and (paired or not part.strip())
        plain = _unquote_pair_value(value.strip()) if paired else ""
        if paired and (_is_secret_pair_name(name.strip()) or _is_base64_json_secret(plain, redactor)):
            lead = value[: len(value) - len(value.lstrip())]
            part = f"{name}={lead}{redactor.hash(plain)}"
        out.append(part)
        start = end + 1
    return ";".join(out), listed


def _pair_end(text: str, start: int) -> int:
    """Where the `;`-separated part starting at `start` ends: the next `;` outside a braced or quoted
    value (the end of `text` when a brace or quote is never closed: all of it is then the value)."""
    semi = text.find(";", start)
    semi = len(text) if semi < 0 else semi
    eq = text.find("=", start, semi)
    if eq < 0:
        return semi
    i = eq + 1
    while i < len(text) and text[i] in " \t":
        i += 1
    close = _PAIR_QUOTES.get(text[i]) if i < len(text) else None
    if close is not None:
        i += 1
        while i < len(text):
            if text[i] == close:
                if text.startswith(close, i + 1):  # doubled: the character itself
                    i += 2
                    continue
                i += 1
                break
            i += 1
        else:
            return len(text)
    semi = text.find(";", i)
    return len(text) if semi < 0 else semi


def _unquote_pair_value(value: str) -> str:
    """A connection string value without its braces or quotes (`{a;b}}c}` is `a;b}c`)."""
    close = _PAIR_QUOTES.get(value[:1])
    if close is not None and len(value) >= 2 and value.endswith(close):
        return value[1:-1].replace(close * 2, close)
    return value


def _redact_userinfo(text: str, redactor: Redactor) -> str:
    """`text` with the password (or the lone user, often a token) of every URL's userinfo hashed.

    The userinfo ends at the *last* `@` of the authority, as urllib's `rpartition("@")` and WHATWG
    parsers read it: a password may hold an unencoded `@` (`postgresql://app:Tr0ub@dor&3@db/x`), and
    cutting at the first `@` left its tail readable. Scanned by hand, each character about once: a
    regular expression for this backtracks quadratically on header values an attacker writes.
    """
    out: list[str] = []
    done = 0
    sep = text.find("://")
    while sep >= 0:
        begin = sep + 3
        end_match = _AUTHORITY_END.search(text, begin)
        end = end_match.start() if end_match else len(text)
        at = text.rfind("@", begin, end)
        if end < len(text) and text[end] in "?#" and ":" in text[begin:end]:
            # `user:Tr0ub#dor@db/app`: libpq and SQLAlchemy read `Tr0ub#dor` as the password; hashing a
            # `host?x=a@b` that is none hides more than needed, never less
            slash = _USERINFO_END.search(text, end)
            wide = slash.start() if slash else len(text)
            at_wide = text.rfind("@", begin, wide)
            if at_wide > end:
                at, end = at_wide, wide
        elif at < 0 and end < len(text) and text[end] == "/" and _port_is_no_port(text[begin:end]):
            # `postgresql://u:ab/cd@h/db`: connection libraries read `ab/cd` as the password (a host's
            # port is digits), up to the last `@` before the text or the URL ends
            space = _SPACE.search(text, end)
            wide = space.start() if space else len(text)
            after = text.find("://", end, wide)
            wide = after if after >= 0 else wide
            at_wide = text.rfind("@", end, wide)
            if at_wide > end:
                at, end = at_wide, wide
        if at >= 0 and _follows_scheme(text, sep):
            user, colon, password = text[begin:at].partition(":")
            if colon and password not in _PLACEHOLDER_PASSWORDS:
                hidden = f"{user}:{redactor.hash(_octets(password))}"
            else:  # the user is the credential (a token), and a placeholder or nothing its password
                hidden = redactor.hash(_octets(user)) + colon + password
            out.append(text[done:begin])
            out.append(hidden)
            done = at
        # an authority holds no '/', so the next "://" starts at its end at the earliest
        sep = text.find("://", max(begin, end - 1))
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _port_is_no_port(authority: str) -> bool:
    """Whether `authority` (no `@` in it) is `name:text` whose text is no port: the start of a
    userinfo whose password holds a `/`."""
    name, colon, port = authority.rpartition(":")
    return bool(colon) and bool(name) and not authority.startswith("[") and not port.isdigit()


_PLACEHOLDER_PASSWORDS: Final = frozenset({"", "x-oauth-basic"})
"""Passwords that say the user is the token (`https://TOKEN:x-oauth-basic@github.com/…`, GitHub's
documented form; `https://sk_live_…:@api.stripe.com`)."""


def _follows_scheme(text: str, sep: int) -> bool:
    """Whether `://` at `sep` follows a scheme: scheme characters, at least one a letter."""
    i = sep
    letter = False
    while i > 0 and text[i - 1] in _SCHEME_CHARS:
        i -= 1
        letter = letter or text[i].isalpha()
    return letter


# --- HTTP ------------------------------------------------------------------------------------------
# Everything below is applied by the HTTP recorder (`addon/http_recorder.py`); header names are
# compared lower-case, values are replaced in place so wire order and duplicates stay visible.

SECRET_HEADERS: Final = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "apikey",
    "x-auth-token",
    "x-access-token",
    "x-amz-security-token",
    "x-goog-api-key",
    "ocp-apim-subscription-key",
)
"""Headers whose values are credentials; hashed by default. Extend with `erascope_redact_headers`."""

SECRET_HEADER_SUFFIXES: Final = (
    "token", "-key", "_key", "apikey", "secret", "password", "passwd", "-jwt", "_jwt", "credential", "-auth",
    "_auth", "-pat", "_pat", "bearer", "passphrase", "-assertion", "_assertion", "-oidc-data",
)  # fmt: skip
"""Any header named like these (`X-API-Token`, `Private-Token`, `X-Service-Key`, `X-Client-Secret`,
`X-ApiKey`, `X-Password`, `X-Jwt`, `X-Auth`) is hashed as a credential too: vendors invent such headers
faster than a list can follow (not `credentials`: CORS's `Access-Control-Allow-Credentials` is a flag);
identity-aware proxies' signed assertions (`Cf-Access-Jwt-Assertion`, `X-Goog-Iap-Jwt-Assertion`,
`X-Amzn-Oidc-Data`) too. One ending in `authorization` or `authentication` (`X-Forwarded-Authorization`)
is read as `Authorization` is: its scheme kept, its credential hashed."""
_AUTHORIZATION_SUFFIXES: Final = ("authorization", "authentication")
HASHED_HEADER_SUFFIXES: Final = ("-session-id", "_session_id", "-session", "_session")
"""Session handles other than `mcp-session-id` (`X-Session-Id`): hashed so they still correlate."""

URL_HEADERS: Final = ("referer", "location", "content-location", ":path", "origin")
"""Headers holding a URL: their secret query values are hashed like the request URL's."""
URL_HEADER_SUFFIXES: Final = ("-url", "-uri", "_url", "_uri")
"""Any header named like these holds a URL too (`X-Original-URL`, `X-Rewrite-URL`, `X-Forwarded-Uri`:
reverse proxies pass the request target the client sent in them)."""
URL_LIST_HEADERS: Final = ("link", "refresh")
"""Headers whose URLs stand inside other text: `Link: <URL>; rel="next", <URL>…` and `Refresh: 5;
url=URL`; each URL in them is redacted as `url` redacts one, the rest stays."""

HOST_HEADERS: Final = ("host", ":authority", "x-forwarded-host", "forwarded")
"""Headers naming a host: a well-known credential in it (`ghp_….example.com`) is hashed as in a URL's host."""

HASHED_HEADERS: Final = ("mcp-session-id",)
"""Not secrets, but bearer-like handles: hashed so sessions still correlate across records."""

PLAIN_HEADERS: Final = frozenset(
    {
        "accept", "accept-charset", "accept-encoding", "accept-language", "accept-ranges", "age",
        "cache-control", "connection", "content-encoding", "content-length", "content-type", "date",
        "expires", "keep-alive", "last-modified", "mcp-method", "mcp-protocol-version", "pragma", "te",
        "traceparent", "transfer-encoding", "vary",
    }
)  # fmt: skip
"""Headers whose grammar holds no credential (media types, encodings, dates, lengths, directives,
MCP's method and version, W3C trace context's ids): kept as they are without the searches for a
credential a header on no list gets (`HttpRedaction.header_value`). Those cost 0.1-0.4 µs a header;
these are most of every request's and answer's headers, on the proxy's event loop."""

SECRET_QUERY_PARAMS: Final = frozenset(
    {
        "token",
        "key",
        "apikey",
        "api_key",
        "api-key",
        "access_token",
        "refresh_token",
        "id_token",
        "auth",
        "code",
        "sig",
        "signature",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "session",
        "session_id",
        "sessionid",
        "jwt",
        "pwd",
        "pw",
        "pass",
        "passphrase",
        "credential",
        "credentials",
        "bearer",
        "oauth_verifier",
        "code_verifier",
        "assertion",
        "client_assertion",
        "device_code",
        "authorization",
        "jsessionid",
        "phpsessid",
        "accesstoken",
        "clientsecret",
        "secretkey",
        "privatekey",
        "authkey",
        "x-goog-signature",
        "x-goog-credential",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)
"""Query parameter names whose values are hashed; names ending in `_token`/`_key`/`_secret` too."""

_QUERY_SECRET_SUFFIXES: Final = (
    *(sep + "key" for sep in "_-."), "token", "secret", "password", "passwd"
)  # `apitoken`, `api_key`: `key` alone ends too many words (`monkey`)
_SET_COOKIE_SPLIT = re.compile(r"(\n|,[ \t]*(?=[^;=,\s]+=))")
_AUTH_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9._~+/-]*) +(\S.*)$")
ENDPOINT_URI_MAX: Final = 2048
"""The longest `endpoint` event data kept as a URI (and read as one by the HTTP recorder)."""
_URI_REFERENCE = re.compile(rb"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%%]{1,%d}" % ENDPOINT_URI_MAX)
"""What an `endpoint` event's data is kept as in `metadata` mode: a URI (RFC 3986's characters)."""

BODIES_FULL: Final = "full"
"""Bodies recorded exactly (the default), but the credentials of one that is no JSON-RPC message
(`CREDENTIALS_HASHED`)."""
BODIES_METADATA: Final = "metadata"
"""Bodies reduced to the JSON-RPC envelope: ids, methods, `_meta`, versions and errors stay;
tool arguments, result contents and log data become `{"$redacted": {"len": N, "hash": "hmac:…"}}`."""
BODY_POLICIES: Final = (BODIES_FULL, BODIES_METADATA)
CREDENTIALS_HASHED: Final = "credentials"
"""The `body_policy` of a body recorded under `full` that is no JSON-RPC message and held credentials
(an OAuth token exchange, a client registration): their values hashed (`HttpRedaction.body`)."""
_CREDENTIAL_BODY_MAX: Final = 64 << 10
"""The longest body that is no JSON-RPC message parsed for credentials: token exchanges and
registrations are small. A larger JSON object or form is searched for a secret-named key without
parsing it, and hashed whole holding one (`HttpRedaction._long_credentials`); any other larger body
(a download, an HTML page) is recorded as it is."""
def _trie(words: list[str]) -> str:
    """An alternation matching any of `words` (none empty, unless to say a word ends there), one
    branch per first character, each a trie of the rest: sre tells the branch from the character at
    hand, where a flat alternation of fifty names tried them in turn at every key."""
    rest = [word for word in words if word]
    if len(rest) < len(words):
        return f"(?:{_trie(rest)})?" if rest else ""
    groups: dict[str, list[str]] = {}
    for word in rest:
        groups.setdefault(word[0], []).append(word[1:])
    branches = [re.escape(first) + _trie(tails) for first, tails in groups.items()]
    return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"


def _reversed_secret_names(boundary: str) -> bytes:
    """What a name `is_secret_query_param` takes looks like read backwards from its end, lower-cased:
    a secret suffix (`api_key`, `auth[token]`) or one of the secret names whole, `boundary` before it
    (a JSON key's `"`, a form's `&`). A search in the body lower-cased and case-sensitive, where `(?i)`
    kept sre from telling a branch by its first character (sixteen milliseconds a megabyte of JSON)."""
    exact = [name[::-1] + "\0" for name in SECRET_QUERY_PARAMS if not name.endswith(_QUERY_SECRET_SUFFIXES)]
    suffixes = [suffix[::-1] for suffix in _QUERY_SECRET_SUFFIXES]
    # `\0` stands for the boundary, `.` for a bracket too (`auth[key]` reads as `auth.key`)
    trie = _trie(exact + suffixes).replace("\0", f"(?:{boundary})").replace(r"\.", r"[.\[]")
    return rf"\]*{trie}".encode()


_JSON_KEY_END: Final = rb':[ \t\r\n]*"'
"""A JSON key's end read backwards: its `:`, the rarest of a key's characters, where searching the
body as it comes for fifty names tried nearly every letter."""
_LONG_JSON_KEY: Final = re.compile(_JSON_KEY_END + _reversed_secret_names('"'))
"""A JSON key named as a secret, in a body reversed and lower-cased."""
_LONG_FORM_KEY: Final = re.compile(b"=" + _reversed_secret_names(r"&|\Z"))
"""A form's name named as a secret, in a form reversed and lower-cased."""
_CAMEL_KEY: Final = rb"\]*yeK"
"""A camel-case `Key` (`apiKey`, `sortKey`) read backwards: no name lower-cased tells it from `monkey`."""
_LONG_JSON_CAMEL_KEY: Final = re.compile(_JSON_KEY_END + _CAMEL_KEY)
_LONG_FORM_CAMEL_KEY: Final = re.compile(b"=" + _CAMEL_KEY)
_LONG_JSON_ESCAPED_KEY: Final = re.compile(_JSON_KEY_END + rb'[^"\\]{0,128}\\')
"""A JSON key written with an escape (`"pass\\u0077ord"`, read as `password`), reversed: searched
only in a body holding a `\\u`."""
_LONG_FORM_ESCAPED_KEY: Final = re.compile(rb"=[^&=%]{0,128}%")
"""A form's name written with an escape (`api%5Fkey`, read as `api_key`), reversed: searched only in
a form holding a `%`."""
_LONG_BODY_NAMES_MAX: Final = 64
"""The most distinct names ending as a secret's (`monkey`, `bypass`) a long body's search reads
before it takes the body for one holding a credential: an attacker can write a million."""
_LONG_BODY_KEYS_MAX: Final = 4096
"""The most keys ending as a secret's name a long body's search looks at (a microsecond each, the
same name repeated in every item of a list) before it takes the body for one holding a credential."""
_KEY_NAME_MAX: Final = 128
"""The longest key read in a long body; one longer ending as a secret's name does is taken for one."""
_BRACE: Final = ord("{")
_JSON_SPACE: Final = frozenset(b" \t\r\n")
_FORM: Final = re.compile(rb"[\w.%+\-\[\]]+=[^&]*(?:&[\w.%+\-\[\]]+=[^&]*)*")
"""An `application/x-www-form-urlencoded` body, read as servers read one: a value may hold what a strict
form would have encoded (`=` of base64, a raw URL, a space)."""

REDACTED_KEY: Final = "$redacted"

ENVELOPE_KEEP: Final = frozenset({"jsonrpc", "id", "method", "params", "result", "error"})
"""Top-level fields `metadata` mode keeps (params, result and error are reduced further)."""
PARAMS_KEEP: Final = frozenset(
    {"_meta", "protocolVersion", "capabilities", "clientInfo", "name", "progressToken", "progress", "total",
     "requestId", "level"}
)  # fmt: skip
"""`params` fields kept: versions, capabilities, client identity, the tool or prompt name, progress
and cancellation bookkeeping. Everything else (arguments, uris, messages, log data) is hashed."""
RESULT_KEEP: Final = frozenset(
    {"_meta", "protocolVersion", "capabilities", "serverInfo", "supportedVersions", "resultType", "ttlMs",
     "cacheScope"}
)  # fmt: skip
"""`result` fields kept: what tells eras and servers apart. Contents, tool lists, instructions, … are hashed."""
ERROR_KEEP: Final = frozenset({"code", "message", "data"})
ERROR_DATA_KEEP: Final = frozenset({"supported", "requested"})
"""`error.data` fields kept (the versions an UnsupportedProtocolVersion names); other data is hashed."""
META_PREFIX: Final = "io.modelcontextprotocol/"
"""`_meta` keys kept: the protocol's own (`io.modelcontextprotocol/…`) and `progressToken`."""


_QUERY_START: Final = re.compile(r"[?#]")
_LINK_TARGET: Final = re.compile(r"<([^>]*)>")
_REFRESH_URL: Final = re.compile(r"""(?i)(\burl[ \t]*=[ \t]*['"]?)([^'"]*)""")
_NESTED_URL_DEPTH: Final = 4
"""How deep URLs given as query values inside URLs are redacted (`?next=https://h/cb?token=…`); a
value nested deeper is hashed whole."""
_ENCODED_SCHEME_END: Final = re.compile(r"(?i)%3A(?:%2F|/){2}")
"""`://` percent-encoded, as a URL given as a query value should be (`next=https%3A%2F%2Fh%2F…`)."""
_PATH_PARAM: Final = re.compile(r";([^/;?#=]+=[^/;?#]*)")
_URL_TOKEN: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
_BYTES_LITERAL: Final = re.compile(r"""(?<![A-Za-z0-9_])b(['"])((?:(?!\1)[^\\]|\\.)*)\1""", re.S)
"""A Python bytes literal, as `repr` quotes bytes (mitmproxy's errors quote what they failed on so)."""
_QUOTED_LINE_END: Final = re.compile(r"(\\r\\n|\\n|\\r)")
"""A line end inside a quoted bytes literal, as Python writes it (the four characters `\r\n`)."""
_STATUS_LINE: Final = re.compile(r"HTTP/\d(?:\.\d)? \d{3}(?: [^\\]*)?$")
_REQUEST_LINE: Final = re.compile(r"([A-Z]+) (\S+)( HTTP/.*)$")


def _masked_url(url: str) -> str:
    scheme, rest = url.split("://", 1)
    rest, query, _ = rest.partition("?")
    at = rest.rfind("@")
    # user information: `token@` or `key:secret@` (a raw secret may hold `/`: up to the last `@`)
    if at >= 0 and (":" in rest[:at] or "/" not in rest[:at]):
        rest = "***" + rest[at:]
    rest = _sub_url_tokens(rest, lambda _: "***")
    return f"{scheme}://{rest}" + ("?***" if query else "")


def mask_urls(text: str) -> str:
    """`text` (a URL, or a message naming URLs) as a log line or an error may show it: the secrets
    a URL can carry replaced by `***`, user information (`s3://key:secret@bucket` → `s3://***@bucket`),
    a well-known credential in the host or the path, percent-encoded or not (`/mcp/sk-proj-…/sse` →
    `/mcp/***/sse`), and the query (`?***`)."""
    return _URL_TOKEN.sub(lambda m: _masked_url(m.group(0)), text)


def without_secret_path_params(path: str) -> str:
    """`path` without its secret-named path parameters (`/mcp;jsessionid=…` → `/mcp`): a server key
    names the server, not one of its sessions."""
    if ";" not in path:
        return path
    return _PATH_PARAM.sub(lambda m: "" if is_secret_query_param(m.group(1).partition("=")[0]) else m.group(), path)


def is_secret_query_param(name: str) -> bool:
    """Whether a query parameter's value is a credential (by name)."""
    low = name.lower().replace("[", ".").replace("]", "")  # `auth[token]`, as PHP and Rails nest them
    return (
        low in SECRET_QUERY_PARAMS
        or low.endswith(_QUERY_SECRET_SUFFIXES)
        or (low != name and name.endswith(("Token", "Secret", "Key", "Password")))  # accessToken, clientSecret
    )


_BASE64_JSON_MIN: Final = 16
"""The shortest query, header or argument value read as base64 JSON: 12 bytes (`{"k":"abcd"}`).
Shorter ones are not decoded, as `e30` (`{}`) or a short id starting with `e` need not be."""
_BASE64_JSON_STARTS: Final = frozenset(
    base64.b64encode(bytes((first, second)))[:2].decode()
    for first in b"{[ \t\r\n"
    for second in b'{}[]" \t\r\n'
)
"""How base64 of a JSON object or array starts: its first two characters (letters, in either
alphabet) spell the first byte and half the second, `{` then `"`, `}` or white space (`eyJ` is `{"`,
`ewo` is `{` and a line end), `[` then `{`, `[`, `"`, `]` or white space (`W3si` is `[{"`, `WyJ` is
`["`), or white space before either. A query or header value starting otherwise (nearly every one,
on every request) is turned away without decoding it."""
_BASE64_JSON_FIRSTS: Final = frozenset(start[0] for start in _BASE64_JSON_STARTS)
"""The first characters of `_BASE64_JSON_STARTS` (`e`, `W`, `C`, `D`, `I`): tested first, by `value[0]`, as
a slice (`value[:2]`) costs twice an index and a header or query value rarely starts so."""
_BASE64_JSON_READ_MAX: Final = 4 << 10
"""The longest base64 JSON value (a query's, a header's, an argument) searched for credentials; a
longer one is hashed whole unread. A hosted server's configuration takes a few hundred characters;
reading every string of a larger object as a command line's argument is read (`_redact_json_strings`)
would hold the proxy's event loop for milliseconds per request (half a millisecond a kilobyte of
short strings), for a value any peer writes."""
_BASE64: Final = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
"""Base64, standard or url-safe (`-` and `_` for `+` and `/`), padded or not."""
_JSON_LEAD: Final = b" \t\r\n"
"""The white space JSON allows before an object."""
_JSON_OPENS: Final = (b"{", b"[")
"""How a JSON object or array starts: what a configuration given as base64 JSON is."""


def _base64_json_holds_secret(value: str, redactor: Redactor, *, read_max: int = _BASE64_JSON_READ_MAX) -> bool:
    """Whether a query value (percent-encoded or not), a header's value, an argument or a variable's
    value is base64, standard or url-safe, padded or not, of a JSON object or array (a list of
    configurations, `W3si…`: `[{"…`) holding a credential: a secret-named field at any depth, or a
    string holding one (a token's shape, a URL's password, a secret query value), as
    `_redact_json_argument` finds them.

    Hosted servers take their whole configuration so, keys and all (Smithery's
    `?config=eyJnaXRodWJQZXJzb25hbEFjY2Vzc1Rva2VuIjoi…`): recorded as it came, anyone decoding it read
    them. The caller hashes such a value whole, as a secret-named one: an object re-encoded with its
    credentials hashed would read as the configuration the client sent and be none, and the whole
    hash still tells equal configurations. One holding no credential stays, as a JSON argument does;
    one longer than `read_max` (`_BASE64_JSON_READ_MAX`) starting as an object or an array is taken
    as holding one, unread. A JWT (`eyJ…` too) holds dots, no base64: it is hashed by its shape, as before. On
    the proxy's path for every query value and every header value no rule hashes, after the caller
    turned away nearly all others by their length and their first characters (`_BASE64_JSON_MIN`,
    `_BASE64_JSON_FIRSTS`, `_BASE64_JSON_STARTS`)."""
    # a space is a raw `+` a form parser read as one
    text = (unquote_plus(value) if "%" in value else value).replace(" ", "+")
    if not _BASE64.fullmatch(text):
        return False
    # url-safe as standard, once it is base64: `str.translate` took microseconds for a JWT's hundred
    # characters, and a JWT (`eyJ…`, dots) comes this far in a header or query value
    text = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:  # a length no base64 has
        return False
    if data.lstrip(_JSON_LEAD)[:1] not in _JSON_OPENS:
        return False
    if len(value) > read_max:
        return True
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(doc, dict | list) and (
        _hash_secret_fields(doc, redactor, _is_secret_pair_name) or _redact_json_strings(doc, redactor)
    )


def _is_base64_json_secret(value: str, redactor: Redactor) -> bool:
    """`_base64_json_holds_secret` behind the test that turns nearly every value away uncalled: for a
    command line's arguments and values, which are no hot path; the proxy's callers test inline."""
    return _starts_as_base64_json(value) and _base64_json_holds_secret(value, redactor)


def _starts_as_base64_json(value: str) -> bool:
    """The test that turns nearly every value away before `_base64_json_holds_secret` decodes it: its
    length and first characters (the proxy's header and query paths write it inline)."""
    return len(value) >= _BASE64_JSON_MIN and value[0] in _BASE64_JSON_FIRSTS and value[:2] in _BASE64_JSON_STARTS


_MECHANISM_PROPERTIES: Final = "authmechanismproperties"
"""MongoDB's connection string option holding the authentication mechanism's `KEY:value` pairs,
comma-separated (`AWS_SESSION_TOKEN:…,SERVICE_NAME:mongodb`), lower-case: drivers read its name in
any case."""
_MECHANISM_PROPERTIES_LEN: Final = len(_MECHANISM_PROPERTIES)
"""Its length, telling every other name apart without lower-casing it."""
_MECHANISM_PROPERTIES_KEPT: Final = frozenset({"TOKEN_RESOURCE"})
"""Mechanism properties named like a secret that hold none: OIDC's `TOKEN_RESOURCE` is the audience
of the token a driver asks for (`api://…`), no token."""
_PROPERTY_SEPARATOR: Final = re.compile(r"(,|%2[Cc])")
_PROPERTY_COLON: Final = re.compile(r":|%3[Aa]")


def _redact_mechanism_properties(value: str, redactor: Redactor) -> str:
    """An `authMechanismProperties` value with the value of each secret-named `KEY:value` pair hashed
    (`AWS_SESSION_TOKEN:…`: MongoDB's AWS authentication takes a session token there, beside the key
    id and secret of the userinfo), the others kept (`SERVICE_NAME:mongodb`, `ENVIRONMENT:azure`).

    Drivers decode the whole value before they split it at `,` and the first `:` of each pair, so an
    encoded `%2C` or `%3A` separates as the character does, and the hash is of the decoded value."""
    parts = _PROPERTY_SEPARATOR.split(value)
    for i in range(0, len(parts), 2):  # the separators stand at the odd places
        colon = _PROPERTY_COLON.search(parts[i])
        if colon is None:
            continue
        key = _unquote(parts[i][: colon.start()]).strip()
        if _is_secret_pair_name(key) and key.upper() not in _MECHANISM_PROPERTIES_KEPT:
            parts[i] = parts[i][: colon.end()] + redactor.hash(_octets(parts[i][colon.end() :], form=True))
    return "".join(parts)


def _redact_query(
    redactor: Redactor,
    query: str,
    is_secret: Callable[[str], bool] = is_secret_query_param,
    *,
    nested: Callable[[str], str] | None = None,
) -> str:
    """`name=value` pairs (`&`-separated) with the values of secret names hashed (a `+` a space, as
    form decoding reads it), and those that are base64 JSON objects or arrays holding a credential
    (`_base64_json_holds_secret`) whatever their names (a `+` a plus, as in base64); with
    `nested`, a value that is a URL (`://`, or `%3A%2F%2F` encoded) becomes `nested(value)`."""
    parts = query.split("&")
    # the base64 JSON values are read up to `_BASE64_JSON_READ_MAX` characters in all, as one is:
    # forty of them (a form body, a long URL) held the proxy's event loop a tenth of a second
    budget = _BASE64_JSON_READ_MAX

    def holds_secret(value: str) -> bool:
        nonlocal budget
        read_max, budget = budget, max(0, budget - len(value))
        return _base64_json_holds_secret(value, redactor, read_max=read_max)

    for i, part in enumerate(parts):
        name, sep, value = part.partition("=")
        if not sep or not value:
            continue
        plain = _unquote(name)
        if is_secret(plain):
            parts[i] = f"{name}={redactor.hash(_octets(value, form=True))}"
        elif (
            # told here for nearly every value, without a call: on the proxy's path for every request
            len(value) >= _BASE64_JSON_MIN
            and value[0] in _BASE64_JSON_FIRSTS
            and value[:2] in _BASE64_JSON_STARTS
            and holds_secret(value)
        ):
            # base64 holds no space: one a form parser made of a raw `+` is that `+` again, so the
            # configuration hashes as the same one given as an argument or a header (`+` kept there)
            parts[i] = f"{name}={redactor.hash(_octets(value, form=True).replace(b' ', b'+'))}"
        elif len(plain) == _MECHANISM_PROPERTIES_LEN and plain.lower() == _MECHANISM_PROPERTIES:
            # before the URL below: a property's value may be one (`TOKEN_RESOURCE:api://…`)
            parts[i] = f"{name}={_redact_mechanism_properties(value, redactor)}"
        elif nested is not None and ("://" in value or ("%3" in value and _ENCODED_SCHEME_END.search(value))):
            parts[i] = f"{name}={nested(value)}"
    return "&".join(parts)


def _secret_key_in(data: bytes, pattern: re.Pattern[bytes], *cased: re.Pattern[bytes]) -> bool:
    """Whether a JSON object's or a form's bytes hold a key that `is_secret_query_param` takes, as
    `pattern` (`_LONG_JSON_KEY`, `_LONG_FORM_KEY`) finds one in the body reversed and lower-cased,
    or one of `cased` in the body reversed; each match a key's end, read forward in `data` (and
    decoded, as a server reads the key). Past
    `_LONG_BODY_NAMES_MAX` distinct names or `_LONG_BODY_KEYS_MAX` keys that are none, or at a name
    longer than `_KEY_NAME_MAX`, it holds one: the body is hashed rather than read further."""
    end = len(data) - 1
    kept: set[str] = set()
    backwards = data[::-1]
    matches = chain(*(each.finditer(backwards) for each in cased), pattern.finditer(backwards.lower()))
    for seen, m in enumerate(matches):
        if seen >= _LONG_BODY_KEYS_MAX:
            return True
        at = end - m.start()  # the `:` or `=` after the key
        if data[at] == 0x3D:  # `=`: a form's name runs from the `&` before it
            amp = data.rfind(b"&", max(0, at - _KEY_NAME_MAX), at)
            if amp < 0 and at > _KEY_NAME_MAX:
                return True
            name = _unquote(data[amp + 1 : at].decode("utf-8", "surrogateescape"))
        else:
            close = data.rfind(b'"', 0, at)
            start = data.rfind(b'"', max(0, close - _KEY_NAME_MAX), close)
            if start < 0:
                return True
            try:
                name = orjson.loads(data[start : close + 1])
            except orjson.JSONDecodeError:  # an escaped quote in the name, or no UTF-8
                return True
        if name not in kept:
            if is_secret_query_param(name) or len(kept) >= _LONG_BODY_NAMES_MAX:
                return True
            kept.add(name)
    return False


def _is_json_object(data: bytes) -> bool:
    """Whether a (non-empty) body starts as a JSON object, told by its first byte for nearly every body."""
    first = data[0]
    return first == _BRACE or (first in _JSON_SPACE and data.lstrip()[:1] == b"{")


def _form_of(data: bytes) -> bytes | None:
    """A body's form (`name=value` pairs), without the line end after it (no part of its last value);
    None when it is no form."""
    form = data.rstrip(b" \t\r\n")
    return form if form.find(b"=") >= 0 and _FORM.fullmatch(form) else None


def _unquote(text: str) -> str:
    return unquote_plus(text)


def _octets(text: str, *, form: bool = False) -> bytes:
    """The bytes a server reads for a URL component: each `%XX` decoded to its octet, and each byte
    that came raw (a lone surrogate where it was no UTF-8, as mitmproxy and `surrogateescape` hand it
    over) as that byte. With `form` (a query, or `name=value` pairs in a fragment) a `+` is a space, as
    servers parse a query; in a userinfo it is a plus, as clients read one for Basic credentials.

    What secrets are hashed from: the same secret sent raw (`\\xff`) or encoded (`%FF`) then hashes
    the same, and two that differ never do. Decoding to text instead (`unquote_plus`) turned every
    octet that is no UTF-8 into U+FFFD, so `%FF` and `%FE` were one secret and `\\xff` another.
    """
    data = text.encode("utf-8", "surrogateescape")
    return unquote_to_bytes(data.replace(b"+", b" ") if form else data)


def _marker(redactor: Redactor, value: object) -> dict[str, object]:
    return _bytes_marker(redactor, orjson.dumps(value))


def _bytes_marker(redactor: Redactor, data: bytes) -> dict[str, object]:
    """What stands for `data` hashed whole: its length and hash under `REDACTED_KEY`."""
    return {REDACTED_KEY: {"len": len(data), "hash": redactor.hash(data)}}


def _keep(redactor: Redactor, obj: object, keep: frozenset[str]) -> object:
    """An object with the `keep` fields as they are and every other value hashed; not an object: hashed."""
    if not isinstance(obj, dict):
        return _marker(redactor, obj)
    return {k: v if k in keep else _marker(redactor, v) for k, v in obj.items()}


def _meta(redactor: Redactor, meta: object) -> object:
    if not isinstance(meta, dict):
        return _marker(redactor, meta)
    return {
        k: v if k == "progressToken" or k.startswith(META_PREFIX) else _marker(redactor, v) for k, v in meta.items()
    }


def _reduce(redactor: Redactor, obj: object, keep: frozenset[str]) -> object:
    out = _keep(redactor, obj, keep)
    if isinstance(out, dict) and "_meta" in out:
        out["_meta"] = _meta(redactor, out["_meta"])
    return out


def _metadata_message(redactor: Redactor, msg: object) -> object:
    if not isinstance(msg, dict):
        return _marker(redactor, msg)
    out = _keep(redactor, msg, ENVELOPE_KEEP)
    assert isinstance(out, dict)
    # the envelope is kept as JSON-RPC writes it, not whatever a peer puts there (an object id, a
    # method that is a list): a value of another shape is content (the analyzer reads none of them)
    if "jsonrpc" in msg and msg["jsonrpc"] != "2.0":
        out["jsonrpc"] = _marker(redactor, msg["jsonrpc"])
    if "id" in msg and not isinstance(msg["id"], str | int | float | None):
        out["id"] = _marker(redactor, msg["id"])
    if "method" in msg and not isinstance(msg["method"], str):
        out["method"] = _marker(redactor, msg["method"])
    if "params" in msg:
        out["params"] = _reduce(redactor, msg["params"], PARAMS_KEEP)
    if "result" in msg:
        out["result"] = _reduce(redactor, msg["result"], RESULT_KEEP)
    if "error" in msg:
        error = _keep(redactor, msg["error"], ERROR_KEEP)
        if isinstance(error, dict) and "data" in error:
            error["data"] = _keep(redactor, error["data"], ERROR_DATA_KEEP)
        out["error"] = error
    return out


_KEEP: Final = "keep"
_PLAIN: Final = "plain"
_HASH: Final = "hash"
_URL: Final = "url"
_URL_LIST: Final = "url list"
_SECRET: Final = "secret"
_TOKENS: Final = "tokens"
_ACTION_CACHE: Final = 1024


class HttpRedaction:
    """The HTTP redaction policy of one recorder: which headers, query values and body parts to hide.

    `enabled=False` records everything as it passed (no hashing at all); `bodies` is `full` or
    `metadata` and applies independently of `enabled`.
    """

    def __init__(
        self,
        redactor: Redactor | None = None,
        *,
        enabled: bool = True,
        bodies: str = BODIES_FULL,
        extra_headers: tuple[str, ...] | list[str] = (),
    ) -> None:
        if bodies not in BODY_POLICIES:
            raise ValueError(f"body policy must be one of {', '.join(BODY_POLICIES)}, not {bodies!r}")
        self.redactor = redactor if redactor is not None else Redactor()
        self.enabled = enabled
        self.bodies = bodies
        self.secret_headers = frozenset(h.lower() for h in (*SECRET_HEADERS, *extra_headers))
        self._actions: dict[str, str] = {}

    def describe(self) -> dict[str, object]:
        """The policy as recorded in the capture header's `redaction` field."""
        return {
            "mode": "hash" if self.enabled else "off",
            "bodies": self.bodies,
            "headers": sorted(self.secret_headers) if self.enabled else [],
            "header_suffixes": (
                [*SECRET_HEADER_SUFFIXES, *_AUTHORIZATION_SUFFIXES, *HASHED_HEADER_SUFFIXES] if self.enabled else []
            ),
            "url_headers": [*URL_HEADERS, *URL_LIST_HEADERS] if self.enabled else [],
            "url_header_suffixes": list(URL_HEADER_SUFFIXES) if self.enabled else [],
            "hashed": list(HASHED_HEADERS) if self.enabled else [],
            "query": (
                "secret-named parameters, base64 JSON objects or arrays holding credentials,"
                " secret authMechanismProperties"
                if self.enabled
                else "off"
            ),
            "userinfo": "password or lone user" if self.enabled else "off",
            "url_tokens": (
                "well-known credentials in host, path, query and fragment, also percent-encoded"
                if self.enabled
                else "off"
            ),
            "host_headers": list(HOST_HEADERS) if self.enabled else [],
        }

    def header_value(self, name: str, value: str) -> str:
        """One header value as it may be recorded. One of a name no rule hashes that is base64 JSON
        holding a credential (a hosted server's configuration, `X-Config: eyJ…`) is hashed whole, as
        such a query value is; one that is a well-known credential (`_TOKEN_SHAPE_LIST`), alone or as
        its last word (`Bearer ghp_…`), has it hashed, as in a URL or an argument."""
        if not self.enabled:
            return value
        action = self._actions.get(name)
        if action is None:
            action = self._action(name)
            if len(self._actions) < _ACTION_CACHE:  # names are attacker-chosen: bound the cache
                self._actions[name] = action
        if action is _PLAIN:
            return value
        if action is _KEEP:
            # told here for nearly every value, without a call: this runs for every header of every request
            if (
                len(value) >= _BASE64_JSON_MIN
                and value[0] in _BASE64_JSON_FIRSTS
                and value[:2] in _BASE64_JSON_STARTS
                and _base64_json_holds_secret(value, self.redactor)
            ):
                return self.redactor.hash(value)
            if len(value) >= _TOKEN_MIN:
                # the value whole or its last word (`Bearer ghp_…`): a search of the whole value cost a
                # microsecond or two on every long header (a user agent), these tests about 0.1 µs
                # the word read in place, no copy; `in` first, as `rfind` costs four times more on a value
                # without a space (an id, a media type)
                start = value.rfind(" ") + 1 if " " in value else 0
                if (
                    len(value) - start >= _TOKEN_MIN
                    and (prefixes := _TOKEN_PREFIXES.get(value[start])) is not None
                    and value.startswith(prefixes, start)
                    and _TOKEN_SHAPE.fullmatch(value, start)
                ):
                    return value[:start] + self.redactor.hash(value[start:])
            return value
        if action is _HASH:
            return self.redactor.hash(value)
        if action is _URL:
            return self.url(value)
        if action is _URL_LIST:
            return self._urls_in(name.lower(), value)
        if action is _TOKENS:
            return self.tokens(value)
        low = name.lower()
        if low in ("cookie", "set-cookie"):
            return self._cookie(value, low == "set-cookie")
        m = _AUTH_SCHEME.match(value)
        if m and low.endswith(_AUTHORIZATION_SUFFIXES):
            # the scheme (Bearer, Basic, …) says how a client authenticates; only the credential is secret
            return f"{m.group(1)} {self.redactor.hash(m.group(2))}"
        return self.redactor.hash(value)

    def _credentials(self, data: bytes) -> bytes | None:
        """A body that is no JSON-RPC message (which holds `"jsonrpc"`), with the values of its
        secret-named fields hashed (`is_secret_query_param`: `code`, `client_secret`, `access_token`,
        …), a form's or a JSON object's at any depth, and those of any name that are base64 JSON
        holding a credential (`{"config": "eyJ…"}`, as a query value); None when it holds none. One
        longer than `_CREDENTIAL_BODY_MAX` is `_long_credentials`. The recorder records every path of
        a server's origin, and an MCP server that is its own OAuth authorization server exchanges
        codes for tokens there."""
        # on the proxy's event loop for every body: a JSON-RPC message is told in about 0.2 µs (a
        # `find`, which costs a third of `in` on bytes here), other bodies by their first byte
        if len(data) > _CREDENTIAL_BODY_MAX:
            return self._long_credentials(data)
        if _is_json_object(data):
            if data.find(b'"jsonrpc"') >= 0:
                return None
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                return None
            hashed = _hash_secret_fields(doc, self.redactor, is_secret_query_param, base64_json=True)
            return orjson.dumps(doc) if hashed else None
        form = _form_of(data)
        if form is not None:
            text = form.decode("utf-8", "surrogateescape")
            hashed = _redact_query(self.redactor, text)
            return hashed.encode("utf-8", "surrogateescape") + data[len(form) :] if hashed != text else None
        return None

    def _long_credentials(self, data: bytes) -> bytes | None:
        """A body longer than `_CREDENTIAL_BODY_MAX` that is no JSON-RPC message, a JSON object or a
        form holding a secret-named key (`_secret_key_in`), as one `$redacted` marker of its length and
        hash; None for any other. Parsing such a body and walking its fields held the proxy's event
        loop for tens of milliseconds a megabyte; this is a few passes in C, then the hash."""
        if _is_json_object(data):
            escaped = (_LONG_JSON_ESCAPED_KEY,) if data.find(b"\\u") >= 0 else ()
            if data.find(b'"jsonrpc"') >= 0 or not _secret_key_in(data, _LONG_JSON_KEY, _LONG_JSON_CAMEL_KEY, *escaped):
                return None
        else:
            form = _form_of(data)
            if form is None or not _secret_key_in(
                form, _LONG_FORM_KEY, _LONG_FORM_CAMEL_KEY, *((_LONG_FORM_ESCAPED_KEY,) if b"%" in form else ())
            ):
                return None
        return orjson.dumps(_bytes_marker(self.redactor, data))

    def hides_header(self, name: str) -> bool:
        """Whether the value of a header of this name is recorded hashed (whole or its credential)."""
        return self.enabled and self._action(name) in (_HASH, _SECRET)

    def _action(self, name: str) -> str:
        """What to do with a header of this name (decided once per name: this runs for every header)."""
        low = name.lower()
        if low in HASHED_HEADERS:
            return _HASH
        if low in self.secret_headers or low.endswith(_AUTHORIZATION_SUFFIXES):
            return _SECRET
        if low.endswith(SECRET_HEADER_SUFFIXES) or low.endswith(HASHED_HEADER_SUFFIXES):
            return _HASH
        if low in URL_HEADERS or low.endswith(URL_HEADER_SUFFIXES):
            return _URL
        if low in URL_LIST_HEADERS:
            return _URL_LIST
        if low in HOST_HEADERS:
            return _TOKENS
        return _PLAIN if low in PLAIN_HEADERS else _KEEP

    def _urls_in(self, low: str, value: str) -> str:
        """A `Link` or `Refresh` value with each URL in it redacted (`URL_LIST_HEADERS`)."""
        if low == "link":
            return _LINK_TARGET.sub(lambda m: f"<{self.url(m.group(1))}>", value)
        return _REFRESH_URL.sub(lambda m: m.group(1) + self.url(m.group(2)), value)

    def _cookie(self, value: str, set_cookie: bool) -> str:
        # cookie names and attributes (Path, Expires, HttpOnly) are not secret and help correlate
        if set_cookie and ("\n" in value or "," in value):
            # several cookies in one field: HAR writers join them with '\n', proxies fold them with ', '
            # (a comma inside `Expires=Wed, 21 Oct …` is no cookie boundary: a cookie starts `name=`)
            parts = _SET_COOKIE_SPLIT.split(value)
            if len(parts) > 1:
                return "".join(self._cookie(part, True) if i % 2 == 0 else part for i, part in enumerate(parts))
        pieces = value.split(";")
        end = 1 if set_cookie else len(pieces)
        for i in range(end):
            name, sep, val = pieces[i].partition("=")
            pieces[i] = f"{name}={self.redactor.hash(val)}" if sep else self.redactor.hash(pieces[i])
        return ";".join(pieces)

    def headers(self, fields: list[tuple[str, str]]) -> list[list[str]]:
        """Headers in wire order as `[name, value]` pairs, secrets hashed."""
        return [[name, self.header_value(name, value)] for name, value in fields]

    def url(self, url: str) -> str:
        """The URL with the values of secret-named query parameters hashed, in its query and in its
        fragment: OAuth's implicit grant hands the token over there (`#access_token=…`), hash routing
        puts a query in it (`#/callback?code=…`), and a request target should hold no `#` at all.
        A fragment without `name=value` pairs is left as it is. The password (or lone user) of a
        userinfo is hashed too, in the URL and in URLs inside it (`?next=https://u:pw@h/`): a
        `Location` or `Referer` can carry one. Last, a well-known credential (`_TOKEN`) anywhere in it
        is hashed whole: hosted servers put keys in the path (`/mcp/sk-proj-…/sse`), tunnels and
        per-tenant gateways in the host (`ghp_….example.com`). A query value of any name that is base64
        JSON holding a credential (a hosted server's `?config=eyJ…`) is hashed whole too, and the
        secret pairs of a MongoDB connection string's `authMechanismProperties` (`AWS_SESSION_TOKEN:…`)."""
        if not self.enabled:
            return url
        return self._url(url, 0)

    def _url(self, url: str, depth: int) -> str:
        """`url` redacted, `depth` URLs deep inside another's query (`_NESTED_URL_DEPTH`)."""
        if "@" in url:
            if url.startswith("//"):  # scheme-relative (`Location: //u:pw@h/`): the scheme of the request
                url = _redact_userinfo("s:" + url, self.redactor)[2:]
            else:
                url = _redact_userinfo(url, self.redactor)
        if ";" in url:
            # a path parameter (`/app;jsessionid=…`): servlet containers put the session there
            end = _QUERY_START.search(url)
            cut = end.start() if end else len(url)
            url = _PATH_PARAM.sub(lambda m: ";" + _redact_query(self.redactor, m.group(1)), url[:cut]) + url[cut:]
        if "?" in url or "#" in url:
            url = self._query_and_fragment(url, depth)
        # after the query: a secret-named value is hashed there from its decoded bytes, and hashing its
        # hash again would break the correlation with the same token in a header or a path
        return self.tokens(url)

    def tokens(self, text: str) -> str:
        """`text` (a URL or a part of it, a host, a server key) with every well-known credential in it
        hashed, written plainly or percent-encoded (`ghp%5F…`).

        Only tokens of a documented shape (`_TOKEN`): any other path segment may be the server's
        own name for a route, and hashing it would split or merge server keys. The hash is of the
        token as a server reads it (decoded), as in command lines and `Authorization` headers, so
        they correlate, and every spelling of one token gives one server key."""
        if not self.enabled:
            return text
        return _sub_url_tokens(text, self.redactor.hash)

    def text(self, text: str) -> str:
        """A message (mitmproxy's flow error) as it may be recorded: the wire bytes it quotes (`b'…'`)
        redacted as the message head they are (`_wire_head`), each URL in it redacted as `url` redacts
        one, and a well-known credential anywhere else hashed (a host quoted alone,
        `Connection to ghp_….example.com:443 failed`). The words stay."""
        if not self.enabled:
            return text
        if "b'" in text or 'b"' in text:
            text = _BYTES_LITERAL.sub(lambda m: f"b{m.group(1)}{self._wire_head(m.group(2))}{m.group(1)}", text)
        if "://" in text:
            text = _URL_TOKEN.sub(lambda m: self.url(m.group()), text)
        return self.tokens(text)

    def _wire_head(self, quoted: str) -> str:
        """The lines of an HTTP message head as Python quotes its bytes (mitmproxy's `unexpected server
        response: b'HTTP/1.1 200 OK\\r\\nSet-Cookie: …'`, `Invalid header line: b'…'`), each as the
        recorder would write it: a header field's value as `header_value` writes it, a request line's
        target as `url` does, a status line kept; any other line (a broken field, garbage) hashed whole."""
        parts = _QUOTED_LINE_END.split(quoted)
        for i in range(0, len(parts), 2):  # the separators stand at the odd places
            line = parts[i]
            if not line or _STATUS_LINE.match(line):
                continue
            if field := _HEADER_SHAPED.match(line):
                parts[i] = f"{field.group(1)}: {self.header_value(field.group(1), field.group(2))}"
            elif request := _REQUEST_LINE.match(line):
                parts[i] = f"{request.group(1)} {self.url(request.group(2))}{request.group(3)}"
            else:
                parts[i] = self.redactor.hash(line)
        return "".join(parts)

    def _query_and_fragment(self, url: str, depth: int) -> str:
        before, hash_sep, fragment = url.partition("#")
        head, query_sep, query = before.partition("?")

        def nested(value: str) -> str:
            return self._nested_url(value, depth + 1)

        if query_sep:
            head = f"{head}?{_redact_query(self.redactor, query, nested=nested)}"
        if hash_sep:
            route, route_sep, route_query = fragment.partition("?")
            fragment = (
                f"{route}?{_redact_query(self.redactor, route_query, nested=nested)}"
                if route_sep
                else _redact_query(self.redactor, fragment, nested=nested)
            )
        return f"{head}{hash_sep}{fragment}"

    def _nested_url(self, value: str, depth: int) -> str:
        """A query value that is a URL (a login's `?next=`, an OAuth `redirect_uri`), redacted as a
        URL: its secret query values and its userinfo, percent-encoded as it should be, or raw.

        A raw one had its userinfo hashed with the URL holding it; an encoded one is decoded as a
        server reads it, redacted, and encoded whole again where that changed it (the hashes are of
        the decoded secrets, as anywhere else). Deeper than `_NESTED_URL_DEPTH` it is hashed whole:
        an attacker may nest without end."""
        if depth > _NESTED_URL_DEPTH:
            return self.redactor.hash(_octets(value, form=True))
        if "://" in value:
            return self._query_and_fragment(value, depth) if "?" in value or "#" in value else value
        decoded = unquote_plus(value, errors="surrogateescape")
        redacted = self._url(decoded, depth)
        return value if redacted == decoded else quote(redacted, safe="", errors="surrogateescape")

    def sse_data(self, event: str, data: bytes) -> tuple[bytes, str]:
        """An SSE event's data under the policy, and the policy applied.

        A legacy `endpoint` event's URL gets its secret query values (the `session_id`), its userinfo
        and the well-known credentials in its path hashed (as `url` does), and is then kept in both
        body modes: it is the transport's bookkeeping (where the client POSTs), not content, and the
        analyzer reads it to join the stream's answers to their session (reduced to a marker, a legacy
        server recorded with `metadata` read as broken). Data that is not a URI of at most 2,048 bytes
        there is a body like any other.
        """
        if event != "endpoint":
            return self.body(data)
        if self.enabled:
            data = self.url(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        return (data, BODIES_FULL) if _URI_REFERENCE.fullmatch(data) else self.body(data)

    def body(self, data: bytes) -> tuple[bytes, str]:
        """A JSON-RPC body (one message or a batch) under the body policy, and the policy applied.

        In `metadata` mode a body that is not JSON becomes a single `$redacted` marker, so nothing
        unparsed slips through; an empty body stays empty.
        """
        if not data:
            return data, self.bodies
        if self.bodies == BODIES_FULL:
            hashed = self._credentials(data) if self.enabled else None
            return (data, self.bodies) if hashed is None else (hashed, CREDENTIALS_HASHED)

        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            return orjson.dumps(_bytes_marker(self.redactor, data)), self.bodies
        if isinstance(doc, list):
            reduced: object = [_metadata_message(self.redactor, m) for m in doc]
        else:
            reduced = _metadata_message(self.redactor, doc)
        return orjson.dumps(reduced), self.bodies
