"""PII redaction as BigCode did it for The Stack / StarCoder (Allal et al. 2023, "SantaCoder", section 3; the
bigcode-dataset `pii` code): secrets, email addresses and IP addresses in a file's text are replaced by
placeholders before it is chunked, and the run's summary counts what was replaced by kind, never the values.

Kinds (`--redact`, REDACT_NAMES) and what each replaces:

- secrets -> `<KEY>` (counted as "key") or `<PASSWORD>` ("password"):
  * token formats, found by detect-secrets' (1.5.0) plugins' own regular expressions: AWS access key ids
    (AKIA/ASIA/ABIA/ACCA/A3T + 16) and AWS secret keys (40 characters quoted near "aws" and "key"/"secret"...),
    Azure storage keys (`AccountKey=` + 88, the value only), GitHub (ghp_/gho_/ghu_/ghs_/ghr_), GitLab, Slack
    (xox[abposr]- tokens, webhook URLs), Stripe (sk_live_/rk_live_), OpenAI, PyPI and SendGrid keys, JWTs
    (detect-secrets' formal check of the header and payload; the signature is replaced too). Ours, where
    detect-secrets has none: GCP API keys (AIza + 35) and GitHub fine-grained tokens (github_pat_).
  * private key blocks: `-----BEGIN ... PRIVATE KEY-----` through its `-----END ... PRIVATE KEY-----` (RSA, EC,
    DSA, OPENSSH, ENCRYPTED, PGP ... BLOCK, SSH2 `---- BEGIN ... ----`), the whole block, comment prefixes and
    string-literal seams inside it included, becomes one `<KEY>`; a block with no END within 20,000 characters
    loses its header line and the base64 lines that follow it. PuTTY key files: the header through Private-MAC.
    (detect-secrets' PrivateKeyDetector flags the header line only, so the extent is ours.)
  * assignments to secret-like names, found by detect-secrets' KeywordDetector expressions for C and C++
    (`password = "..."`, `pwd == "..."`, `char passwd[16] = "..."`, `std::string secret("...")`, and the quoted
    `"password": "..."` form of JSON kept in strings or comments). A password-like name (password, passwd, pwd,
    db_pass, key_pass, contraseña) gets its literal's value replaced by `<PASSWORD>`, quotes and name kept,
    unless the value is plainly not a password: no letter or digit, whitespace (prose such as "Enter password:"),
    a template (`<...>`, `{...}`, `${...}`, `%s`), or a letters-only name holding the keyword itself ("password",
    "db_password": a field name, not a value). Any other secret-like name (api_key, auth_key, private_key,
    client_key, secret, token, access_key, ...) has its value replaced by `<KEY>` only when the value is a
    high-entropy key by detect-secrets' own measures: at least 16 characters, Base64HighEntropyString's charset
    and Shannon entropy > 4.5 or HexHighEntropyString's > 3.0, and neither sequential ("ABCDEF...") nor a UUID.
    Long hex constants, hash tables and base64 test vectors elsewhere in C++ are never looked at.
- emails -> `<EMAIL>`: `local@domain.tld` (local part of [A-Za-z0-9._%+-], dotted domain, alphabetic TLD of 2+).
  Emails in license headers and author lines are redacted too, as BigCode did: the names stay, the addresses
  go. Not emails: doxygen `@param`/`@file`, `foo@2x.png` and other `@` + file names (a TLD that is a file
  extension: png, svg, cpp, h, json ...), `git@host:repo` remotes, npm-style `pkg@1.2.3`.
- ips -> `<IP_ADDRESS>`: IPv4 dotted quads (octets 0-255, no leading zeros) and IPv6 addresses in the global
  unicast block 2000::/3 (so C++ scopes such as `abc::def`, which parse as IPv6, are never candidates), except
  addresses that identify no one: private (10/8, 172.16/12, 192.168/16, fc00::/7), loopback (127/8, ::1),
  link-local, unspecified (0.0.0.0, ::), shared 100.64/10, reserved (240/4, netmasks such as 255.255.255.0),
  multicast, broadcast and the documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32),
  classified by Python's `ipaddress` (plus the documentation ranges listed explicitly, whatever the Python).
  Not addresses although valid public IPv4 (BigCode redacted every valid public IPv4 but x.x.x.x of single
  digits, unless "dns" or "server" was near): a dotted quad on a line that names a version, an OID or a section
  ("version", "ver", "release", "rev", "revision", "oid", "section", "clause", "\u00a7": `#define VERSION
  "1.2.3.4"`, `kLibVersion = "12.0.1.7"`, `GNUTLS_OID_X520_COMMON_NAME "2.5.4.3"`); one inside a longer dotted
  run (OIDs 1.3.6.1.4.1, "1.2.3.4.5") or after a letter ("v1.2.3.4"); and, outside a string literal, one whose
  first three numbers are all under 51: how C++ comments cite clauses of ISO 14882 and other standards
  ("[27.4.5.1]", "22.2.1.5", IEEE "9.4.2.251"), 82 of them in libstdc++'s bits/ alone. So "8.8.8.8" in a string is
  redacted, `// resolver 8.8.8.8` in a comment is kept (a public resolver, and about 1% of public addresses).

Speed. `apply` runs once per C++ file on its whole text in the chunking workers (chunking runs 2-3 MB/s a core),
so a file with nothing to redact must cost a few whole-text scans. `re` finds a pattern that starts with a literal
by a fast search (~2 GB/s) but tries an alternation at every position, so every prefilter below starts with a
literal character, its markers grouped by that character: 7 scans for secrets (`A` on the text for AWS, GCP and
Azure; on the ASCII-lowercased text `g` GitHub/GitLab/SendGrid, `xox`, `k` key-names and token-names assigned a
quoted literal/Stripe/OpenAI, `p` password/pwd names/PyPI/private keys/PuTTY, `c` secret/contraseña names, `.`
JWTs/Slack webhooks), 1 for emails (`@` + domain) and 2 for IPs (`.d.d.`, `:h:`/`hhhh::`). Only the lines these
hit, cut to 2,048 characters either side of the hit, are handed to the detectors. Measured on one core over
/usr/include/c++/12/bits (4.3 MB, 152 headers, no secret), throughput of secrets redaction:
    detect-secrets `SecretsCollection.scan_file` (its default plugins and filters)        0.2 MB/s
    detect-secrets' plugin expressions (ours) on every line, no prefilter                 1.5 MB/s
    our rules, each run over the whole text, no prefilter                                  1.7 MB/s
      (the token rules alone 24 MB/s; KeywordDetector's expressions are the slow ones)
    this module: the prefilter, then the plugin expressions on the lines it hits         250 MB/s
All three kinds: ~160 MB/s (emails ~1,600, IPs ~750); with a file in ten holding 7 planted secrets, ~107 MB/s.
A file dense with hits costs ~1 MB/s (~20 us a hit), and none costs worse than linear time in its length.

Redactor holds only its kinds: the detectors (detect-secrets' plugin objects and expressions) are built on first
use in each process, so the object pickles to the workers whatever detect-secrets holds. Nothing here logs or
prints; `find` returns spans and kinds, never a matched value.
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from collections import Counter
from functools import lru_cache
from typing import NamedTuple

from nanodata.errors import NanodataError
from nanodata.pipeline.cleaning.stages import TextTransform, parse_names

REDACT_NAMES = ("secrets", "emails", "ips")
DEFAULT_REDACT = REDACT_NAMES
_CHOICES = f"choose from {', '.join(REDACT_NAMES)}, or none"

PLACEHOLDERS = {"key": "<KEY>", "password": "<PASSWORD>", "email": "<EMAIL>", "ip_address": "<IP_ADDRESS>"}


def parse_redact_list(text: str) -> tuple[str, ...]:
    """The CLI's --redact value: "none" for no redaction, "all" or "" for the defaults, else comma-separated kinds
    (returned in REDACT_NAMES' order, each once)."""
    return parse_names(text, "--redact", REDACT_NAMES, "kind")


class Redaction(NamedTuple):
    """One replaced span: text[start:end] becomes PLACEHOLDERS[kind]. `detector` names what found it ("aws_key",
    "private_key", "password", "email", "ipv4", ...); the matched value itself is never kept."""
    start: int
    end: int
    kind: str
    detector: str


# --- prefilter: literal-led expressions, each one fast whole-text scan ------------------------------------------------

# Every secret the detectors below find holds one of these markers, and most C++ files hold none. `re` finds a
# pattern that starts with a literal with a fast search (~2 GB/s) but tries an alternation of literals at every
# position (~130 MB/s for these markers as one alternation, ~160 MB/s per case-insensitive stem), so the markers
# are grouped by their first character, one scan each, on the ASCII-lowercased text where case does not matter.
_ASSIGNED = r"\w*(?:\[\d*\])?[\]'\"]{0,2}\s*(?:={1,3}|!==?|:=?|,|\(|\.assign\()\s*@?[\"'`]"  # name = "...
_MARKER = re.compile(r"A(?:KIA|SIA|BIA|CCA|3T|Iza|ccountKey=)")  # AWS key ids, GCP API keys, Azure storage keys
_LOWER_MARKERS = tuple(re.compile(p) for p in (
    # GitHub, GitLab (and its runner tokens), SendGrid (SG.<22>.)
    r"g(?:h[pousr]_|ithub_pat_|l(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent)-|r1348941|\.[a-z0-9_-]{22}\.)",
    r"xox[abposr]-",  # Slack tokens
    # api_key/auth_key/... = "...", token = "...", Stripe (sk_live_/rk_live_), OpenAI (sk-...T3BlbkFJ...)
    r"k(?:ey" + _ASSIGNED + r"|en" + _ASSIGNED + r"|_live_|-[a-z0-9_-]{0,200}t3blbkfj)",
    # password/passwd/db_pass/pwd = "...", PyPI, private keys (PEM, OpenSSH, PGP, SSH2), PuTTY key files
    r"p(?:ass" + _ASSIGNED + r"|wd" + _ASSIGNED + r"|ypi-age|rivate key|utty-user-key-file)",
    r"c(?:ret" + _ASSIGNED + r"|ontrase" + _ASSIGNED + r")",  # secret = "...", contraseña = "..."
    r"\.(?:eyj|slack\.com/services)",  # JWTs (the payload after the header's dot), Slack webhooks
))

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ascii_lower(text: str) -> str:
    """text with A-Z lowercased and every character at its index (str.lower() can lengthen a few characters)."""
    if text.isascii():
        return text.lower()
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _line_of(text: str, at: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return start, (len(text) if end < 0 else end)


_HALF_WINDOW = 2_048  # a hit is looked at within its line, or 2,048 characters each side in a longer line


def _hit_lines(text: str, markers, scanned: str | None = None) -> list[tuple[int, int]]:
    """The spans (start, end) of `text` to hand to the detectors: the lines where any of `markers` matches `scanned`
    (text itself by default; a copy with every character at its index), each cut to _HALF_WINDOW characters either
    side of the hit (a minified file's one line costs a window per hit, not a scan of the line), merged."""
    spans = []
    size = len(text)
    for marker in markers:
        last_end = -1
        for m in marker.finditer(text if scanned is None else scanned):
            at = m.start()
            if at < last_end:
                continue
            low, high = max(0, at - _HALF_WINDOW), min(size, at + _HALF_WINDOW)
            start = text.rfind("\n", low, at)
            end = text.find("\n", at, high)
            spans.append((start + 1 if start >= 0 else low, end if end >= 0 else high))
            last_end = spans[-1][1]
    return _merged(spans)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if len(spans) < 2:
        return spans
    spans.sort()
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


# --- secrets ----------------------------------------------------------------------------------------------------------

_PEM_HEADER = re.compile(r"-{4,5} ?BEGIN ((?:[A-Z0-9]+ )*?)PRIVATE KEY( BLOCK)? ?-{4,5}")
_PEM_FOOTER = re.compile(r"-{4,5} ?END ((?:[A-Z0-9]+ )*?)PRIVATE KEY( BLOCK)? ?-{4,5}")
_KEY_BLOCK_MAX = 20_000  # characters from a BEGIN to its END (an RSA-4096 key in a C string literal: ~4,000)
_PEM_BODY_LINE = re.compile(r"[ \t]*(?://+|#|\*|\")?[ \t]*\"?(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: .*)(?:\\n)?\"?[ \t,;+]*")
_PUTTY_HEADER = re.compile(r"PuTTY-User-Key-File-\d+:")
_PUTTY_END = re.compile(r"Private-MAC: ?[0-9a-fA-F]+")
_GCP_KEY = re.compile(r"AIza[0-9A-Za-z_\-]{35}")
_GITHUB_PAT = re.compile(r"github_pat_[0-9A-Za-z_]{22,255}")
_JWT_TAIL = re.compile(r"[A-Za-z0-9_\-.+/=]*")
_PASSWORD_STEMS = ("pass", "pwd", "contrase")
_NAME_LIKE = re.compile(r"[a-z_.\-]*(?:pass|pwd|secret|token|key|contrase)[a-z_.\-ñ]*")
_TEMPLATED = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[sdixXfgcpu]|\{\d*\}|\$\{|\$\(")
# Names that hold keys but are not in detect-secrets' denylist (its expressions' shape, quotes required).
_EXTRA_KEY_NAMES = re.compile(
    r"(token|access_?key|signing_?key|encryption_?key|master_?key|app_?key)\w*[\]'\"]{0,2}\s*(?:={1,3}|:|\()\s*@?"
    r"([\"'`])([^\n'\"`]+)\2",
    re.IGNORECASE,
)


class _Rule(NamedTuple):
    detector: str
    regex: re.Pattern
    group: int = 0  # the group holding the secret (0: the whole match)


class _Detectors:
    """detect-secrets' plugins and expressions, built once per process (never pickled)."""

    def __init__(self):
        import logging
        import warnings

        showwarning = warnings.showwarning
        from detect_secrets.filters.heuristic import is_potential_uuid, is_sequential_string, is_templated_secret
        from detect_secrets.plugins import keyword as kw
        from detect_secrets.plugins.aws import AWSKeyDetector
        from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
        from detect_secrets.plugins.github_token import GitHubTokenDetector
        from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
        from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
        from detect_secrets.plugins.jwt import JwtTokenDetector
        from detect_secrets.plugins.openai import OpenAIDetector
        from detect_secrets.plugins.pypi_token import PypiTokenDetector
        from detect_secrets.plugins.sendgrid import SendGridDetector
        from detect_secrets.plugins.slack import SlackDetector
        from detect_secrets.plugins.stripe import StripeDetector

        if warnings.showwarning is not showwarning:  # detect_secrets.core.log calls logging.captureWarnings(True)
            logging.captureWarnings(False)

        aws_id, aws_secret = AWSKeyDetector.denylist
        # Spans come from the plugins' expressions directly: RegexBasedDetector.analyze_string yields a regex's
        # groups when it has any, so GitHub's and GitLab's (which group the prefix only) would yield "ghp".
        self.token_rules = (
            _Rule("aws_key", aws_id),
            _Rule("aws_secret_key", aws_secret, 1),
            *(_Rule("azure_storage_key", rx) for rx in AzureStorageKeyDetector.denylist),
            _Rule("gcp_api_key", _GCP_KEY),
            *(_Rule("github_token", rx) for rx in GitHubTokenDetector.denylist),
            _Rule("github_token", _GITHUB_PAT),
            *(_Rule("gitlab_token", rx) for rx in GitLabTokenDetector.denylist),
            *(_Rule("slack_token", rx) for rx in SlackDetector.denylist),
            *(_Rule("stripe_key", rx) for rx in StripeDetector.denylist),
            *(_Rule("openai_key", rx) for rx in OpenAIDetector.denylist),
            *(_Rule("pypi_token", rx) for rx in PypiTokenDetector.denylist),
            *(_Rule("sendgrid_key", rx) for rx in SendGridDetector.denylist),
            *(_Rule("jwt", rx) for rx in JwtTokenDetector.denylist),
        )
        self.jwt_valid = JwtTokenDetector.is_formally_valid
        # KeywordDetector's expressions for C and C++ (its REGEX_BY_FILETYPE), plus the quoted JSON colon form;
        # group 1 is the denylisted stem, `group` the value. Iterated with finditer (analyze_string stops at a
        # line's first match per expression and gives no position).
        self.keyword_rules = (
            _Rule("keyword", kw.FOLLOWED_BY_EQUAL_SIGNS_QUOTES_REQUIRED_REGEX, 5),
            _Rule("keyword", kw.FOLLOWED_BY_OPTIONAL_ASSIGN_QUOTES_REQUIRED_REGEX, 4),
            _Rule("keyword", kw.FOLLOWED_BY_EQUAL_SIGNS_OPTIONAL_BRACKETS_OPTIONAL_AT_SIGN_QUOTES_REQUIRED_REGEX, 6),
            _Rule("keyword", kw.FOLLOWED_BY_COLON_QUOTES_REQUIRED_REGEX, 5),
            _Rule("keyword", _EXTRA_KEY_NAMES, 3),
        )
        self.base64 = Base64HighEntropyString()  # limit 4.5, detect-secrets' default
        self.hex = HexHighEntropyString()  # limit 3.0
        self.base64_chars = frozenset(self.base64.charset)
        self.hex_chars = frozenset(self.hex.charset)
        self.is_sequential = is_sequential_string
        self.is_uuid = is_potential_uuid
        self.is_templated = is_templated_secret

    def high_entropy(self, value: str) -> bool:
        if len(value) < 16 or self.is_sequential(value) or self.is_uuid(value):
            return False
        chars = set(value)
        if chars <= self.hex_chars:
            return self.hex.calculate_shannon_entropy(value) > self.hex.entropy_limit
        if chars <= self.base64_chars:
            return self.base64.calculate_shannon_entropy(value) > self.base64.entropy_limit
        return False

    def plausible_password(self, value: str, quote: str) -> bool:
        if not value or any(ch.isspace() for ch in value) or not any(ch.isalnum() for ch in value):
            return False
        if quote == "'" and len(value) < 2:  # a C++ character literal
            return False
        if self.is_templated(value) or _TEMPLATED.search(value):
            return False
        return not _NAME_LIKE.fullmatch(value.lower())


@lru_cache(maxsize=1)
def _detectors() -> _Detectors:
    return _Detectors()


def _literal_end(text: str, start: int, end: int, limit: int) -> int:
    """The end of a quoted value that detect-secrets' expressions cut at an escaped quote (`"ab\\"cd"`)."""
    backslashes = len(text[start:end]) - len(text[start:end].rstrip("\\"))
    if backslashes % 2 == 0 or end >= limit:
        return end
    quote, i = text[end], end + 1
    while i < limit:
        if text[i] == "\\":
            i += 2
        elif text[i] == quote:
            return i
        else:
            i += 1
    return end


def _secret_spans(text: str) -> list[Redaction]:
    lines = _merged(_hit_lines(text, (_MARKER,)) + _hit_lines(text, _LOWER_MARKERS, _ascii_lower(text)))
    if not lines:
        return []
    found: list[Redaction] = []
    if any("PRIVATE KEY" in text[ls:le] or "PuTTY-User-Key-File" in text[ls:le] for ls, le in lines):
        found.extend(_private_key_spans(text))
    det = _detectors()
    for ls, le in lines:
        for rule in det.token_rules:
            for m in rule.regex.finditer(text, ls, le):
                start, end = m.span(rule.group)
                if rule.detector == "azure_storage_key" and text.startswith("AccountKey=", start):
                    start += len("AccountKey=")
                elif rule.detector == "jwt":
                    if not det.jwt_valid(m.group()):
                        continue
                    end = _JWT_TAIL.match(text, end, le).end()
                found.append(Redaction(start, end, "key", rule.detector))
        for rule in det.keyword_rules:
            for m in rule.regex.finditer(text, ls, le):
                start, end = m.span(rule.group)
                end = _literal_end(text, start, end, le)
                value = text[start:end]
                stem = m.group(1).lower()
                if stem.startswith(_PASSWORD_STEMS) or "pass" in stem:
                    if det.plausible_password(value, text[start - 1]):
                        found.append(Redaction(start, end, "password", "password"))
                elif det.high_entropy(value):
                    found.append(Redaction(start, end, "key", "keyword_key"))
    return found


def _private_key_spans(text: str) -> list[Redaction]:
    """Each key block whole, from its BEGIN line to its END line; with no END of the same label within
    _KEY_BLOCK_MAX characters, the BEGIN line and the base64 lines after it. The ENDs are found in one scan and
    matched to their BEGINs by position (a lazy `.*?END` from every BEGIN is quadratic in a file of headers)."""
    found = []
    footers = [(f.start(), f.end(), f.group(1), f.group(2)) for f in _PEM_FOOTER.finditer(text)]
    footer_starts = [f[0] for f in footers]
    pos = 0
    while (m := _PEM_HEADER.search(text, pos)) is not None:
        stop = None
        k = bisect.bisect_left(footer_starts, m.end())
        while k < len(footers) and footers[k][0] <= m.end() + _KEY_BLOCK_MAX:
            if footers[k][2:] == m.groups():
                stop = footers[k][1]
                break
            k += 1
        if stop is None:
            stop = _line_of(text, m.start())[1]
            while stop < len(text):
                nxt = _line_of(text, stop + 1)
                if not _PEM_BODY_LINE.fullmatch(text, nxt[0], nxt[1]):
                    break
                stop = nxt[1]
        found.append(Redaction(m.start(), stop, "key", "private_key"))
        pos = max(stop, m.end())
    pos = 0
    while (m := _PUTTY_HEADER.search(text, pos)) is not None:
        end = _PUTTY_END.search(text, m.end(), m.end() + _KEY_BLOCK_MAX)
        stop = end.end() if end is not None else _line_of(text, m.start())[1]
        found.append(Redaction(m.start(), stop, "key", "private_key"))
        pos = max(stop, m.end())
    return found


# --- emails -----------------------------------------------------------------------------------------------------------

_EMAIL_DOMAIN = re.compile(
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,24})(?![A-Za-z0-9-])", re.ASCII)
_EMAIL_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
# "@" + a file name, not a domain: foo@2x.png, icon@3x.svg, file@rev.cpp
_FILE_EXTENSIONS = frozenset("""
    png jpg jpeg gif svg webp bmp ico tif tiff pdf psd h hh hpp hxx cpp cxx inl ipp tpp txt json xml html htm js ts
    css py rb pl java kt go rs swift zip gz tgz tar bz2 xz lock yaml yml toml ini cfg conf log obj exe dll lib dylib
    wasm bin dat csv md5 sha1 sha256 proto cmake mk
""".split())


def _email_spans(text: str) -> list[Redaction]:
    found = []
    if "@" not in text:
        return found
    for m in _EMAIL_DOMAIN.finditer(text):
        at = m.start()
        start = at
        while start > 0 and at - start < 64 and text[start - 1] in _EMAIL_LOCAL_CHARS:
            start -= 1
        while start < at and not text[start].isalnum():
            start += 1
        if start == at or m.group(1).lower() in _FILE_EXTENSIONS or text[start:at] == "git":
            continue
        found.append(Redaction(start, m.end(), "email", "email"))
    return found


# --- IP addresses -----------------------------------------------------------------------------------------------------

_IPV4_MARKER = re.compile(r"\.\d{1,3}\.\d{1,3}\.", re.ASCII)
_IPV4 = re.compile(
    r"(?<![\w.])(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}(?!\w|\.\d)", re.ASCII)
_IPV6_MARKER = re.compile(r":(?:[0-9a-fA-F]{1,4}:|:(?<=[23][0-9a-fA-F]{3}::))", re.ASCII)
_IPV6 = re.compile(r"(?<![\w:.])[23][0-9a-fA-F]{3}(?::(?:[0-9a-fA-F]{1,4})?){1,7}(?![\w:]|\.\w)", re.ASCII)
# A line that names a version, an OID or a clause: its dotted quads are "1.2.3.4" versions, X.500 OIDs
# ("2.5.4.3", GNUTLS_OID_X520_COMMON_NAME) or section numbers, not hosts. ("void" holds no "oid": a letter before.)
_NOT_AN_ADDRESS_CONTEXT = re.compile(
    r"version|(?<![a-z])(?:ver|rev|revision|oid)(?![a-z])|release|section|clause|\u00a7", re.IGNORECASE)
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_KEPT_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
    "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4",
    "240.0.0.0/4", "2001:db8::/32", "fc00::/7", "fe80::/10", "ff00::/8",
))


def _is_public(address) -> bool:
    if not address.is_global or address.is_multicast:
        return False
    return not any(address.version == net.version and address in net for net in _KEPT_NETWORKS)


def _section_number(octets: list[int]) -> bool:
    """27.4.5.1, 22.2.1.5, 5.2.1.21, 9.4.2.251: how sources cite a clause of ISO 14882, ECMA-262 or IEEE 802.11
    (a public address has its first three numbers all under 51 about once in a hundred)."""
    return max(octets[:3]) <= 50


def _ip_spans(text: str) -> list[Redaction]:
    found = []
    for ls, le in _hit_lines(text, (_IPV4_MARKER,)):
        version_line = None
        for m in _IPV4.finditer(text, ls, le):
            try:
                address = ipaddress.IPv4Address(m.group())
            except ValueError:
                continue
            if not _is_public(address):
                continue
            if version_line is None:
                version_line = bool(_NOT_AN_ADDRESS_CONTEXT.search(text, ls, le))
            if version_line:
                continue
            in_string = text.count('"', ls, m.start()) % 2 == 1
            if not in_string and _section_number([int(o) for o in m.group().split(".")]):
                continue
            found.append(Redaction(m.start(), m.end(), "ip_address", "ipv4"))
    for ls, le in _hit_lines(text, (_IPV6_MARKER,)):
        for m in _IPV6.finditer(text, ls, le):
            try:
                address = ipaddress.IPv6Address(m.group())
            except ValueError:
                continue
            if address in _GLOBAL_UNICAST and _is_public(address):
                found.append(Redaction(m.start(), m.end(), "ip_address", "ipv6"))
    return found


# --- the transform ----------------------------------------------------------------------------------------------------

class Redactor(TextTransform):
    """Replaces the secrets, emails and/or IP addresses of a file's text by placeholders (see the module doc)."""
    name = "redact"

    def __init__(self, kinds: tuple[str, ...] = DEFAULT_REDACT):
        kinds = tuple(kinds)
        unknown = [k for k in kinds if k not in REDACT_NAMES]
        if unknown:
            raise NanodataError(f"--redact {unknown[0]!r}: unknown kind; {_CHOICES}")
        self.kinds = tuple(k for k in REDACT_NAMES if k in kinds)

    # Only the kinds travel to the workers; the detectors are built there on first use (_detectors()).
    def __getstate__(self):
        return {"kinds": self.kinds}

    def __setstate__(self, state):
        self.kinds = tuple(state["kinds"])

    def __eq__(self, other):
        return isinstance(other, Redactor) and other.kinds == self.kinds

    def __hash__(self):
        return hash((Redactor, self.kinds))

    def __repr__(self):
        return f"Redactor({self.kinds!r})"

    def find(self, text: str) -> list[Redaction]:
        """The spans to replace, in order, none overlapping (the longest first where two start together, so a
        private key block wins over what lies inside it)."""
        found: list[Redaction] = []
        if "secrets" in self.kinds:
            found.extend(_secret_spans(text))
        if "emails" in self.kinds:
            found.extend(_email_spans(text))
        if "ips" in self.kinds:
            found.extend(_ip_spans(text))
        if len(found) < 2:
            return found
        found.sort(key=lambda r: (r.start, r.start - r.end))
        kept, last_end = [], -1
        for r in found:
            if r.start >= last_end and r.end > r.start:
                kept.append(r)
                last_end = r.end
        return kept

    def apply(self, text: str) -> tuple[str, Counter]:
        found = self.find(text) if text else []
        if not found:
            return text, Counter()
        parts, pos = [], 0
        for r in found:
            parts.append(text[pos:r.start])
            parts.append(PLACEHOLDERS[r.kind])
            pos = r.end
        parts.append(text[pos:])
        return "".join(parts), Counter(r.kind for r in found)
