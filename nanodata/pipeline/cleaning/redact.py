"""PII redaction as BigCode did it for The Stack / StarCoder (Allal et al. 2023, "SantaCoder", section 3; the
bigcode-dataset `pii` code): secrets, email addresses and IP addresses in a file's text are replaced by
placeholders before it is chunked, and the run's summary counts what was replaced by kind, never the values.

Kinds (`--redact`, REDACT_NAMES) and what each replaces:

- secrets -> `<KEY>` (counted as "key") or `<PASSWORD>` ("password"):
  * token formats, found by detect-secrets' (1.5.0) plugins' own regular expressions: AWS access key ids
    (AKIA/ASIA/ABIA/ACCA/A3T + 16) and AWS secret keys (40 characters quoted near "aws" and "key"/"secret"...),
    Azure storage keys (`AccountKey=` + 88, the value only), GitHub (ghp_/gho_/ghu_/ghs_/ghr_), GitLab, Slack
    (xox[abposr]- tokens, webhook URLs), Stripe (sk_live_/rk_live_), OpenAI (sk-...T3BlbkFJ...), PyPI, SendGrid,
    Discord bot tokens (<24>.<6>.<27>, a newer token's longer third part included), Telegram bot tokens (<bot
    id>:<35>), Mailchimp (<32>-us<n>), Square OAuth secrets (sq0csp-), Twilio API key SIDs (SK + 32, and only with
    "twilio" within 2 lines: a SID alone is an identifier), JWTs (detect-secrets' formal check of the header and
    payload; the signature is replaced too). The Discord, Telegram, Mailchimp and Twilio expressions are bounded, so
    that a token inside a longer run of its characters is not cut out of it.
  * ours, where detect-secrets has no plugin: each service's documented prefix and length, checked against
    gitleaks' default rules (config/gitleaks.toml) and trufflehog's detectors, which spell them out. GCP API keys
    (AIza + 35), GitHub fine-grained tokens (github_pat_), OpenAI project/service/admin keys (sk-proj-,
    sk-svcacct-, sk-admin- + 40 or more), Anthropic (sk-ant-api03-/sk-ant-admin01- + 93 + AA), Hugging Face
    (hf_ + 34 letters, api_org_ + 34), npm (npm_ + 36), Google OAuth client secrets (GOCSPX- + 28), DigitalOcean
    (dop_v1_/doo_v1_/dor_v1_ + 64 hex), Heroku (HRKU-AA + 58; a classic UUID key under a name holding "heroku"),
    Shopify (shpat_/shpss_/shpca_/shppa_ + 32 hex), Mailgun (key- + 32 hex), Slack app and configuration tokens
    (xapp-, xoxe.xoxb-, xoxe-), Stripe test and prod secret keys (sk_test_/rk_test_/sk_prod_), Square access
    tokens (sq0atp-, EAAA), RubyGems (rubygems_ + 48 hex), NuGet (oy2 + 43), Docker Hub (dckr_pat_ + 27,
    dckr_oat_ + 32), Atlassian (ATATT3 + 186), Databricks (dapi + 32 hex), Doppler (dp.pt./dp.st./dp.ct./dp.sa.
    ... + 40-44), Postman (PMAK- + 24 hex - 34 hex), Grafana (glc_, glsa_), New Relic (NRAK- + 27), Sentry
    (sntryu_ + 64 hex, sntrys_eyJpYXQiO...), Linear (lin_api_ + 40), Notion (ntn_ + 11 digits + 35, secret_ + 43),
    Groq (gsk_ + 52), Replicate (r8_ + 37), Perplexity (pplx- + 48), Azure AD client secrets (<3><digit>Q~<31-34>),
    Alibaba (LTAI + 12-20), Tencent (AKID + 32), age (AGE-SECRET-KEY-1 + 58), CircleCI (CCIPAT_), Vault (hvs. +
    90-120, hvb. + 138-300), Pulumi (pul- + 40 hex), Terraform Cloud (<14>.atlasv1.<60-70>), Fly.io (fo1_, fm1a_,
    fm1r_, fm2_), Netlify (nfp_ + 36), Artifactory (AKCp + 69). Services whose keys have no prefix (Cohere, Travis
    CI, Vercel, Netlify's and CircleCI's older tokens...) are found by their names, below. Stripe's publishable keys
    (pk_live_/pk_test_) are kept: Stripe has them embedded in web pages and apps by design, they grant nothing.
  * an AWS secret access key beside its key id: a quoted (or `=`-assigned) 40-character base64 value after `=`, a
    comma or a parenthesis within 2 lines of an AWS key id (`Aws::Auth::AWSCredentials c("AKIA...", "wJalr...")`,
    the next field of an initializer), holding two classes of characters and a digit, `/` or `+` (detect-secrets'
    own verification reads the key id's neighbourhood for it the same way, get_secret_access_keys).
  * the password of a URI's user information, `scheme://user:password@host` (postgresql, mysql, mongodb+srv, redis
    `://:password@`, amqp, ftp, https...): detect-secrets' BasicAuthDetector expression, widened to an empty user and
    to RFC 3986's sub-delimiters in the password, becomes `<PASSWORD>`, scheme, user and host kept (the host's
    public IP address then goes to the ips kind); a format string or template (`%s`, `{}`, `${PASS}`) is kept.
  * private key blocks: `-----BEGIN ... PRIVATE KEY-----` through its `-----END ... PRIVATE KEY-----` (RSA, EC,
    DSA, OPENSSH, ENCRYPTED, PGP ... BLOCK, SSH2 `---- BEGIN ... ----`), the whole block, comment prefixes and
    string-literal seams inside it included, becomes one `<KEY>`; a block with no END within 20,000 characters
    loses its header line and the base64 lines that follow it. PuTTY key files: the header through Private-MAC.
    (detect-secrets' PrivateKeyDetector flags the header line only, so the extent is ours.)
  * assignments to secret-like names, found by detect-secrets' KeywordDetector expressions for C and C++
    (`password = "..."`, `pwd == "..."`, `char passwd[16] = "..."`, `std::string secret("...")`, and the quoted
    `"password": "..."` form of JSON kept in strings or comments), and ours: `#define NAME "..."` with a
    secret-like NAME. A password-like name (password, passwd, pwd, db_pass, key_pass, contraseña) gets its
    literal's value replaced by `<PASSWORD>`, quotes and name kept, unless the value is plainly not a password: no
    letter or digit, whitespace (prose such as "Enter password:"), a template (`<...>`, `{...}`, `${...}`, `%s`), or
    a letters-only name holding the keyword itself ("password", "db_password": a field name, not a value). Any
    other secret-like name (api_key, auth_key, private_key, client_key, client_secret, secret, token, access_key,
    ...) has its value replaced by `<KEY>` when the value is shaped like a key, whatever its entropy (detect-secrets'
    Base64HighEntropyString limit of 4.5 passes almost no random key of 16-20 characters): 12 or more characters of
    the base64/base64url/hex alphabets (and `.`, `~`), letters with digits or both cases, 6 or more distinct
    characters, and none of a path, a version ("1.2.3-beta4"), a placeholder word (your, example, changeme, xxxx,
    ...), a sequence or a UUID (detect-secrets' filters), or a run of words (`_identifier_like`:
    "RpcGroupManagementToken", "sha256WithRSAEncryption", "kCFBundleVersionKey"). Hex values of 16 or more under
    such a name are keys. Long hex constants, hash tables and base64 test vectors elsewhere in C++ are never looked
    at.
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
by a fast search (~3 GB/s) but tries an alternation at every position, so every prefilter below starts with a
literal character, its markers grouped by that character, and each alternative in a group starts with a literal
(a rare one after the group's character, so that each occurrence of that character costs a comparison or two); a
marker may start inside its token, a lookbehind checking what precedes (`k` for "sk-proj-", `p` for "npm_"). 15
scans for secrets: `A` on the text (AWS, GCP, Azure, and the other formats that fix an upper-case A: Tencent, Alibaba,
Atlassian, age, Square EAAA, Postman, New Relic, Heroku, Telegram's `:AA`), and on the ASCII-lowercased text `g`
(GitHub, GitLab, SendGrid, Grafana, Groq, RubyGems), `-` (Slack, PyPI, Mailchimp, Perplexity, Pulumi, Square, Google
OAuth), `k` (key and token names assigned or #defined a quoted literal, private keys, Stripe, OpenAI, Anthropic,
Mailgun, age, Docker Hub, Twilio, Heroku, Slack webhooks), `p` (password and pwd names, npm, Databricks, Linear,
Doppler, DigitalOcean dop_v1_, Netlify, CircleCI, Sentry sntrys_, Hugging Face api_org_), `c` (secret and contraseña
names, Notion secret_), `.` (JWTs, Terraform, Discord), `h` (Hugging Face hf_, Shopify, Vault), `://` (URIs with a
password), and one each for the formats that fix none of those characters at a known place, on the rarest character
they do fix: `y` (Sentry sntryu_, NuGet oy2), `8_` (Replicate r8_), `v1_` (DigitalOcean doo_v1_/dor_v1_), `n_`
(Notion ntn_), `q~` (Azure AD client secrets), `f` (Fly.io). Those six take ~10 ms of the 28 ms secrets cost over
bits/ below (the rest: ~18 ms), so that every format is found alone, in a literal whose name says nothing. 1 scan for emails (`@` +
domain) and 2 for IPs (`.d.d.`, `:h:`/`hhhh::`). Only the lines these hit, cut to 2,048 characters either side of
the hit (widened to the ends of a token the cut would split), are handed to the detectors, and a format's rule runs
on a hit line only when the lowercased line holds its literal (its "needles").
Measured on one core over /usr/include/c++/12/bits (4.3 MB, 152 headers, no secret), throughput of secrets
redaction:
    (the first three measured with the first rule set)
    detect-secrets `SecretsCollection.scan_file` (its default plugins and filters)        0.2 MB/s
    detect-secrets' plugin expressions (ours) on every line, no prefilter                 1.5 MB/s
    our rules, each run over the whole text, no prefilter                                  1.7 MB/s
      (the token rules alone 24 MB/s; KeywordDetector's expressions are the slow ones)
    this module: the prefilter, then the plugin expressions on the lines it hits         147 MB/s
      (228 MB/s without the six scans of the formats no group leads to; 250 MB/s with the 7 scans of the first
      rule set, before the formats from gitleaks' list, URIs, #define)
All three kinds: ~115 MB/s (emails ~1,600, IPs ~750); with a file in ten holding 7 planted secrets, ~95 MB/s.
A file dense with hits costs ~2 MB/s (~45 us a hit line), and none costs worse than linear time in its length.

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
from nanodata.settings import REDACT_NAMES

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
# pattern that starts with a literal with a fast search (~3 GB/s) but tries an alternation of literals at every
# position (~130 MB/s for these markers as one alternation, ~160 MB/s per case-insensitive stem), so the markers
# are grouped by their first character, one scan each, on the ASCII-lowercased text where case does not matter. A
# marker may start inside its token (k for "sk-proj-", p for "npm_") with a lookbehind checking what precedes; each
# alternative starts with a literal, a rare one after the group's character where it can (an alternative whose first
# character often follows, as "e" follows "g", costs ~0.2 ms more on bits/ than one that fails at once), so that an
# occurrence of the group's character costs a comparison or two. A new group costs ~1.3 ms there (~7%).


def _assigned(tail: str) -> str:
    """`name = "...` (or `#define NAME "...`) after a secret-like stem: the rest of the name, matched once (the
    lookahead and backreference to group `tail` make an atomic group, so a long identifier is not backtracked
    through), an assignment, a comparison, a call or a JSON colon, and the opening quote."""
    return (rf"(?=(?P<{tail}>\w*))(?P={tail})(?:\[\d*\])?[\]'\"]{{0,2}}\s*"
            r"(?:={1,3}|!==?|:=?|,|\(|\.assign\(|(?<=[ \t]))\s*@?(?:u8|[ul])?[\"'`]")


# On the text itself, tokens whose format fixes an upper-case A: AWS key ids, GCP API keys, Azure storage keys,
# Tencent (AKID), Artifactory (AKCp), Atlassian (ATATT3), age (AGE-SECRET-KEY-1), Alibaba (LTAI), Square (EAAA),
# Postman (PMAK-), New Relic (NRAK-), Heroku (HRKU-AA), Telegram bot tokens (<bot id>:AA...).
_MARKER = re.compile(
    r"A(?:K(?:I[AD]|Cp|-(?<=PMAK-|NRAK-))|SIA|BIA|CCA|3T|Iza|ccountKey=|TATT3|GE-SECRET-KEY-1|I(?<=LTAI)"
    r"|A(?:A(?<=EAAA)|(?<=HRKU-AA)|(?<=[0-9]:AA)))")
_LOWER_MARKERS = tuple(re.compile(p) for p in (
    # GitHub, GitLab, SendGrid (SG.<22>.), Grafana (glc_, glsa_), Groq (gsk_), RubyGems (rubygems_)
    r"g(?:h[pousr]_|ithub_pat_|l(?:pat-|dt-|ft-|soat-|rt-|cbt-|imt-|ptt-|agent-|oas-|c_|sa_)|sk_|r1348941"
    r"|\.[a-z0-9_-]{22}\.|ems_(?<=rubygems_))",
    # Mailchimp (<32 hex>-us<n>), PyPI (pypi-AgEIcHlwaS5vcmc..., test.pypi's pypi-AgENdGVzdC5weXBpLm9yZw...), Slack
    # (xox?- tokens, xapp- app tokens), Perplexity (pplx-), Pulumi (pul-), Square (sq0atp-, sq0csp-), Google OAuth
    # client secrets (GOCSPX-)
    r"-(?:us\d|age(?:ichlwas5vcmc|ndgvzdc5wexbplm9yzw)"
    r"|[0-9a-z_-](?:(?<=pplx-.|xapp-.|xox[abposre]-.)|(?<=pul-.)|(?<=sq0atp-.|sq0csp-.|gocspx-.)))",
    # key names assigned a quoted literal or #defined to one, Mailgun (key-), age (age-secret-key-1), PuTTY
    # (putty-user-key-file), PEM/PGP/SSH2 "PRIVATE KEY"; token names; Stripe (sk_/rk_ live, test, prod), OpenAI
    # (sk-proj-, sk-svcacct-, sk-admin-, sk-...T3BlbkFJ), Anthropic (sk-ant-), Docker Hub (dckr_pat_, dckr_oat_),
    # Twilio (SK + 32 hex), Heroku, Slack webhooks (hooks.slack.com/services)
    r"k(?:ey(?:" + _assigned("key") + r"|-(?:[0-9a-f]{32}|1|file)|(?<=private key))|en" + _assigned("token")
    + r"|_(?:live|test|prod)_|-(?:proj-|svcacct-|admin-|ant-|[a-z0-9_-]{0,200}t3blbkfj)|r_[po]at_"
    r"|[0-9a-f]{32}(?<=sk[0-9a-f]{32})|u(?<=heroku)|\.com/services)",
    # password/passwd/db_pass/pwd names, CircleCI (CCIPAT_), npm (npm_), Databricks (dapi), Linear (lin_api_),
    # Hugging Face organisations (api_org_), Doppler (dp.pt. ...), DigitalOcean (dop_v1_), Netlify (nfp_), Sentry
    # organisation tokens (sntrys_eyJpYXQiO...)
    r"p(?:a(?:ss" + _assigned("pass") + r"|t_(?<=ccipat_))|wd" + _assigned("pwd")
    + r"|m_[a-z0-9]{36}|i(?:[0-9a-f]{32}|_(?:org_|(?<=lin_api_)))"
    r"|\.(?:pt|st|ct|sa|scim|audit)\.|_(?:v1_|(?<=nfp_))|yxqio)",
    # secret names (client_secret, ...), Notion (secret_ + 43), contraseña names
    r"c(?:ret(?:" + _assigned("secret") + r"|_[a-z0-9]{43})|ontrase" + _assigned("contrase") + ")",
    # JWTs (the payload after the header's dot), Terraform (.atlasv1.), Discord bot tokens (<24+>.<6>.<27+>)
    r"\.(?:eyj|atlasv1\.|[a-z0-9_-]{6}\.(?<=[a-z0-9]{23}\.[a-z0-9_-]{6}\.))",
    # Hugging Face (hf_ + 34 letters), Shopify (shpat_, shpss_, shpca_, shppa_), Vault (hvs., hvb.)
    r"h(?:f_[a-z]{34}|p(?:at|ss|ca|pa)_[0-9a-f]{32}|v[sb]\.[a-z0-9_-]{90})",
    r"://[^\s/?#@\"'<>]{0,256}@",  # URIs with a user (and password): scheme://user:password@host
    # Formats none of the groups above leads to, each on the rarest character it fixes: Sentry user tokens
    # (sntryu_) and NuGet (oy2), Replicate (r8_), DigitalOcean OAuth and refresh tokens (doo_v1_, dor_v1_), Notion
    # (ntn_ + digits), Azure AD client secrets (<3><digit>Q~), Fly.io (fo1_, fm1a_, fm1r_, fm2_).
    r"y(?:u_(?<=sntryu_)|2(?<=oy2))",
    r"8_[a-z0-9_-]{37}(?<=r8_[a-z0-9_-]{37})",
    r"v1_(?<=doo_v1_|dor_v1_)",
    r"n_\d(?<=ntn_\d)",
    r"q~",
    r"f(?:o1_|m(?:1[ar]|2)_)",
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
_RUN_MAX = 512  # a window cut inside a longer line is widened to the ends of the token run it cuts, up to this
_RUN_AFTER = re.compile(rf"[^\s\"'`]{{0,{_RUN_MAX}}}")
_RUN_STOPS = frozenset(" \t\r\n\f\v\"'`")


def _hit_lines(text: str, markers, scanned: str | None = None) -> list[tuple[int, int]]:
    """The spans (start, end) of `text` to hand to the detectors: the lines where any of `markers` matches `scanned`
    (text itself by default; a copy with every character at its index), each cut to _HALF_WINDOW characters either
    side of the hit (a minified file's one line costs a window per hit, not a scan of the line) and widened to the
    ends of a run of non-space characters the cut falls in (a second token near the window's edge, whose marker
    starts no window of its own, reaches the detectors whole), merged."""
    spans = []
    size = len(text)
    scanned = text if scanned is None else scanned
    for marker in markers:
        m = marker.search(scanned)  # most files: no hit, and one search costs less than starting a finditer
        while m is not None:
            at = m.start()
            low, high = max(0, at - _HALF_WINDOW), min(size, at + _HALF_WINDOW)
            start = text.rfind("\n", low, at)
            end = text.find("\n", at, high)
            if start >= 0:
                low = start + 1
            else:  # a token straddling the cut would reach the detectors in part, so none is cut
                floor = max(0, low - _RUN_MAX)
                while low > floor and text[low - 1] not in _RUN_STOPS:
                    low -= 1
            high = end if end >= 0 else _RUN_AFTER.match(text, high).end()
            spans.append((low, high))
            m = marker.search(scanned, max(high, m.end()))
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


def _nearby(text: str, start: int, end: int, lines: int = 2) -> tuple[int, int]:
    """The span from `lines` lines above text[start:end]'s line to `lines` lines below it (each side cut at
    _HALF_WINDOW characters)."""
    low = text.rfind("\n", 0, start) + 1
    for _ in range(lines):
        if low == 0:
            break
        low = text.rfind("\n", 0, low - 1) + 1
    high = text.find("\n", end)
    for _ in range(lines):
        if high < 0:
            break
        high = text.find("\n", high + 1)
    high = len(text) if high < 0 else high
    return max(low, start - _HALF_WINDOW), min(high, end + _HALF_WINDOW)


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
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_\-]*")
_PASSWORD_STEMS = ("pass", "pwd", "contrase")
_NAME_LIKE = re.compile(r"[a-z_.\-]*(?:pass|pwd|secret|token|key|contrase)[a-z_.\-ñ]*")
_TEMPLATED = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[sdixXfgcpu]|\{\d*\}|\$\{|\$\(")
# Names that hold keys but are not in detect-secrets' denylist; _KEY_ASSIGNED, its expressions' shape (quotes
# required) for these and its own key names, takes a value starting with any character (its SECRET, a word character).
_EXTRA_KEY_NAMES = r"token|access_?key|signing_?key|encryption_?key|master_?key|app_?key"
_KEY_ASSIGNED = r"({})\w*[\]'\"]{{0,2}}\s*(?:={{1,3}}|:|\()\s*@?([\"'`])([^\n'\"`]+)\2"  # .format(names)
# `#define NAME "value"` (the macro's name is checked against the secret-like names apart: the name must end with
# one, so API_KEY_HEADER "X-Api-Key" and PASSWD_CHARSET "0123456789abcdef" are not secrets).
_DEFINED = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(?:u8|[uUL])?\"((?:[^\"\\\n]|\\.)+)\"", re.MULTILINE)
# A key's value under a key's name: 12+ characters of base64/base64url/hex and dotted-token alphabets, holding
# letters and digits or both cases, and none of: a version, a placeholder word, a run of words (an identifier).
_KEY_ALPHABET = re.compile(r"[A-Za-z0-9+/=_\-.~]{12,1024}")
_VERSION = re.compile(r"[vV]?\d+(?:[._-]\d+)+(?:[-+._]?[A-Za-z]+[A-Za-z0-9]*(?:[._-]?\d+)*)*")
_PLACEHOLDER = re.compile(r"your|example|sample|dummy|placeholder|change_?me|redacted|xxxx|insert|replace",
                          re.IGNORECASE)
_WORD_PIECE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_INNER_DIGITS = re.compile(r"(?<=[A-Za-z])[0-9]+(?=[A-Za-z])")
_WORD_SEAM = re.compile(r"[_.\-/+~]|[a-z][A-Z]")  # where two words meet in an identifier, a path or a name
_VOWELS = frozenset("aeiouyAEIOUY")
_HEX = frozenset("0123456789abcdefABCDEF")


def _identifier_like(value: str) -> bool:
    """A run of words: camelCase, snake_case, dotted or dashed pieces averaging 2.8+ characters, 70% of the letters
    in pieces with a vowel, at most one number between letters and none longer than 4 digits ("kCFBundleVersionKey",
    "sha256WithRSAEncryption", "RpcGroupManagementToken"). Random keys are not: their pieces are short and
    consonant-heavy (about 1% of 16-character alphanumeric or base64 keys read as runs of words, 0.2% of 32-character
    ones), and
    one of a single case with no separator is no identifier at all."""
    if len(_INNER_DIGITS.findall(value)) > 1 or not _WORD_SEAM.search(value):
        return False
    pieces = _WORD_PIECE.findall(value)
    if not pieces or sum(map(len, pieces)) < 2.8 * len(pieces):
        return False
    letters = [p for p in pieces if not p.isdigit()]
    if any(len(p) > 4 for p in pieces if p.isdigit()):
        return False
    worded = sum(len(p) for p in letters if len(p) > 1 and not _VOWELS.isdisjoint(p))
    return worded >= 0.7 * sum(map(len, letters))


def _aws_secret_shaped(value: str) -> bool:
    """A 40-character AWS secret access key beside its key id: base64 characters of at least two classes (upper,
    lower, digit) with a digit, "/" or "+" among them (not a 40-letter identifier), and not a 40-digit hex SHA-1."""
    classes = any(c.isupper() for c in value) + any(c.islower() for c in value) + any(c.isdigit() for c in value)
    return classes >= 2 and not set(value) <= _HEX and not value.isalpha()


def _token(body: str, flags: int = 0, chars: str = r"A-Za-z0-9_\-") -> re.Pattern:
    """A token format, `body`, not inside a longer run of token characters (`chars`)."""
    return re.compile(rf"(?<![{chars}])(?:{body})(?![{chars}])", flags)


# Ours: token formats detect-secrets has no plugin for, from each service's documented prefix and length (as
# gitleaks' default rules and trufflehog's detectors spell them out). (detector, expression, needles): a rule runs
# on a hit line only when the line, lowercased, holds one of its needles.
_FORMATS = (
    ("openai_key", _token(r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}"), ("sk-",)),
    ("anthropic_key", _token(r"sk-ant-(?:api03|admin01)-[A-Za-z0-9_-]{93}AA"), ("sk-ant-",)),
    ("huggingface_token", _token(r"(?:hf|api_org)_[A-Za-z]{34}"), ("hf_", "api_org_")),
    ("npm_token", _token(r"npm_[A-Za-z0-9]{36}"), ("npm_",)),
    ("google_oauth_secret", _token(r"GOCSPX-[A-Za-z0-9_-]{28}"), ("gocspx-",)),
    ("digitalocean_token", _token(r"do[opr]_v1_[a-f0-9]{64}"), ("_v1_",)),
    ("heroku_key", _token(r"HRKU-AA[A-Za-z0-9_-]{58}"), ("hrku-aa",)),
    ("shopify_token", _token(r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"), ("shp",)),
    ("mailgun_key", _token(r"key-[0-9a-f]{32}"), ("key-",)),
    ("slack_token", _token(r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+|xoxe\.xox[bp]-\d-[A-Z0-9]{163,166}|xoxe-\d-[A-Z0-9]{146}",
                           re.IGNORECASE), ("xapp-", "xoxe")),
    ("stripe_key", _token(r"[rs]k_(?:test|prod)_[A-Za-z0-9]{10,99}"), ("k_test_", "k_prod_")),
    ("square_token", re.compile(r"(?<![A-Za-z0-9_+/=-])(?:EAAA|sq0atp-)[A-Za-z0-9_-]{22,60}(?=[\s\"'`;,)\\]|$)"),
     ("eaaa", "sq0atp-")),
    ("rubygems_token", _token(r"rubygems_[a-f0-9]{48}"), ("rubygems_",)),
    ("nuget_key", _token(r"oy2[a-z0-9]{43}"), ("oy2",)),
    ("dockerhub_token", _token(r"dckr_pat_[A-Za-z0-9_-]{27}|dckr_oat_[A-Za-z0-9_-]{32}"), ("dckr_",)),
    ("atlassian_token", _token(r"ATATT3[A-Za-z0-9_=-]{186}", chars=r"A-Za-z0-9_=\-"), ("atatt3",)),
    ("databricks_token", _token(r"dapi[a-f0-9]{32}(?:-\d)?"), ("dapi",)),
    ("doppler_token", _token(r"dp\.(?:ct|pt|st(?:\.[a-z0-9_-]{2,35})?|sa|scim|audit)\.[A-Za-z0-9]{40,44}"),
     ("dp.",)),
    ("postman_key", _token(r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"), ("pmak-",)),
    ("grafana_token", _token(r"glc_[A-Za-z0-9+/]{32,400}={0,3}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}",
                             chars=r"A-Za-z0-9_+/=\-"), ("glc_", "glsa_")),
    ("new_relic_key", _token(r"NRAK-[A-Za-z0-9]{27}"), ("nrak-",)),
    ("sentry_token", _token(r"sntryu_[a-f0-9]{64}|sntrys_eyJpYXQiO[A-Za-z0-9+/]{20,400}={0,2}_[A-Za-z0-9+/]{43}",
                            chars=r"A-Za-z0-9_+/=\-"), ("sntry",)),
    ("linear_key", _token(r"lin_api_[A-Za-z0-9]{40}"), ("lin_api_",)),
    ("notion_token", _token(r"ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43}"), ("ntn_", "secret_")),
    ("groq_key", _token(r"gsk_[A-Za-z0-9]{52}"), ("gsk_",)),
    ("replicate_token", _token(r"r8_[A-Za-z0-9_-]{37}"), ("r8_",)),
    ("perplexity_key", _token(r"pplx-[A-Za-z0-9]{48}"), ("pplx-",)),
    ("azure_ad_secret", _token(r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}", chars=r"A-Za-z0-9_~.\-"), ("q~",)),
    ("alibaba_key", _token(r"LTAI[A-Za-z0-9]{12,20}"), ("ltai",)),
    ("tencent_key", _token(r"AKID[A-Za-z0-9]{32}"), ("akid",)),
    ("age_key", _token(r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"), ("age-secret-key-1",)),
    ("circleci_token", _token(r"CCIPAT_[A-Za-z0-9]{22}_[a-fA-F0-9]{40}"), ("ccipat_",)),
    ("vault_token", _token(r"hvs\.[A-Za-z0-9_-]{90,120}|hvb\.[A-Za-z0-9_-]{138,300}"), ("hvs.", "hvb.")),
    ("pulumi_token", _token(r"pul-[a-f0-9]{40}"), ("pul-",)),
    ("terraform_token", _token(r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}", chars=r"A-Za-z0-9_=\-"),
     (".atlasv1.",)),
    ("flyio_token", _token(r"fo1_[A-Za-z0-9_-]{43}|fm(?:1[ar]|2)_[A-Za-z0-9+/]{100,}={0,3}", chars=r"A-Za-z0-9_+/=\-"),
     ("fo1_", "fm1", "fm2_")),
    ("netlify_token", _token(r"nfp_[A-Za-z0-9_]{36}"), ("nfp_",)),
    ("artifactory_key", _token(r"AKCp[A-Za-z0-9]{69}"), ("akcp",)),
)
# A password in a URI's user information, scheme://user:password@host: detect-secrets' BasicAuthDetector expression
# widened to an empty user (redis://:password@host) and RFC 3986's sub-delimiters (!$&()*+,;=) in the password.
_URI_PASSWORD = re.compile(r"://[^\s:/?#\[\]@\"'`<>{}\\]*:([^\s/?#\[\]@\"'`<>{}\\]+)@(?=[A-Za-z0-9\[])")
_URI_TEMPLATED = re.compile(r"%(?![0-9A-Fa-f]{2})[-+ #0]*\d*(?:\.\d+)?[sdixXfgcpu]|\$\(")  # %s, not %40 (an escape)
_URI_USERINFO = re.compile(r"://[^\s:/?#\[\]@\"'`<>{}\\]*:[^\s/?#\[\]@\"'`<>{}\\]*\Z")  # what precedes the @ of one
# Heroku's classic API keys are UUIDs: one only under a name holding "heroku" (gitleaks' heroku-api-key).
_HEROKU_KEY = re.compile(r"heroku\w*[\]'\"]{0,2}\s*(?:={1,3}|:=?|,|\()\s*@?([\"'`])"
                         r"([0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12})\1", re.IGNORECASE)
# An AWS secret access key as an argument or value beside its key id (detect-secrets' get_secret_access_keys shape:
# after =, a comma or a parenthesis, quotes optional), looked for within 2 lines of the key id.
_AWS_SECRET_NEAR = re.compile(r"(?:[=,(:]|^)[ \t]*([\"']?)([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])\1", re.MULTILINE)


class _Rule(NamedTuple):
    detector: str
    regex: re.Pattern
    group: int = 0  # the group holding the secret (0: the whole match)
    needles: tuple[str, ...] = ()  # run only on a hit line whose lowercased text holds one of these (none: always)
    kind: str = "key"
    context: str = ""  # and only when this (lowercased) is within 2 lines of the match


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
        from detect_secrets.plugins.discord import DiscordBotTokenDetector
        from detect_secrets.plugins.github_token import GitHubTokenDetector
        from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
        from detect_secrets.plugins.jwt import JwtTokenDetector
        from detect_secrets.plugins.mailchimp import MailchimpDetector
        from detect_secrets.plugins.openai import OpenAIDetector
        from detect_secrets.plugins.pypi_token import PypiTokenDetector
        from detect_secrets.plugins.sendgrid import SendGridDetector
        from detect_secrets.plugins.slack import SlackDetector
        from detect_secrets.plugins.square_oauth import SquareOAuthDetector
        from detect_secrets.plugins.stripe import StripeDetector
        from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
        from detect_secrets.plugins.twilio import TwilioKeyDetector

        if warnings.showwarning is not showwarning:  # detect_secrets.core.log calls logging.captureWarnings(True)
            logging.captureWarnings(False)

        def bounded(rx: re.Pattern, before: str, after: str = "") -> re.Pattern:
            """A plugin's expression, not inside a longer run of its characters (`before`, `after`)."""
            return re.compile(rf"(?<![{before}])(?:{rx.pattern})" + (rf"(?![{after}])" if after else ""), rx.flags)

        aws_id, aws_secret = AWSKeyDetector.denylist
        twilio_sk = next(rx for rx in TwilioKeyDetector.denylist if rx.pattern.startswith("SK"))
        # Spans come from the plugins' expressions directly: RegexBasedDetector.analyze_string yields a regex's
        # groups when it has any, so GitHub's and GitLab's (which group the prefix only) would yield "ghp".
        self.token_rules = (
            _Rule("aws_key", aws_id),
            _Rule("aws_secret_key", aws_secret, 1, ("aws",)),
            *(_Rule("azure_storage_key", rx, 0, ("accountkey=",)) for rx in AzureStorageKeyDetector.denylist),
            _Rule("gcp_api_key", _GCP_KEY, 0, ("aiza",)),
            *(_Rule("github_token", rx, 0, ("gh",)) for rx in GitHubTokenDetector.denylist),
            _Rule("github_token", _GITHUB_PAT, 0, ("github_pat_",)),
            *(_Rule("gitlab_token", rx, 0, ("gl", "gr1348941")) for rx in GitLabTokenDetector.denylist),
            *(_Rule("slack_token", rx, 0, ("xox", "hooks.slack.com")) for rx in SlackDetector.denylist),
            *(_Rule("stripe_key", rx, 0, ("k_live_",)) for rx in StripeDetector.denylist),
            *(_Rule("openai_key", rx, 0, ("t3blbkfj",)) for rx in OpenAIDetector.denylist),
            *(_Rule("pypi_token", rx, 0, ("pypi-",)) for rx in PypiTokenDetector.denylist),
            *(_Rule("sendgrid_key", rx, 0, ("sg.",)) for rx in SendGridDetector.denylist),
            *(_Rule("jwt", rx, 0, ("eyj",)) for rx in JwtTokenDetector.denylist),
            *(_Rule("discord_token", bounded(rx, r"A-Za-z0-9_\-"), 0, (".",))
              for rx in DiscordBotTokenDetector.denylist),
            *(_Rule("telegram_token", bounded(rx, r"0-9", r"A-Za-z0-9_\-"), 0, (":",))
              for rx in TelegramBotTokenDetector.denylist),
            *(_Rule("mailchimp_key", bounded(rx, r"A-Za-z0-9", r"0-9"), 0, ("-us",))
              for rx in MailchimpDetector.denylist),
            *(_Rule("square_token", rx, 0, ("sq0csp-",)) for rx in SquareOAuthDetector.denylist),
            _Rule("twilio_key", bounded(twilio_sk, r"A-Za-z0-9", r"A-Za-z0-9"), 0, ("sk",), "key", "twilio"),
            *(_Rule(detector, rx, 0, needles) for detector, rx, needles in _FORMATS),
            _Rule("heroku_key", _HEROKU_KEY, 2, ("heroku",)),
            _Rule("uri_password", _URI_PASSWORD, 1, ("://",), "password"),
        )
        self.needles = tuple(sorted({needle for rule in self.token_rules for needle in rule.needles}))
        self.rules_for_needles: dict[frozenset, tuple[_Rule, ...]] = {}
        self.aws_secret_near = _AWS_SECRET_NEAR
        self.jwt_valid = JwtTokenDetector.is_formally_valid
        # KeywordDetector's expressions for C and C++ (its REGEX_BY_FILETYPE), plus the quoted JSON colon form;
        # group 1 is the denylisted stem, `group` the value. Iterated with finditer (analyze_string stops at a
        # line's first match per expression and gives no position). Then ours: more key names, #define.
        self.keyword_rules = (
            _Rule("keyword", kw.FOLLOWED_BY_EQUAL_SIGNS_QUOTES_REQUIRED_REGEX, 5),
            _Rule("keyword", kw.FOLLOWED_BY_OPTIONAL_ASSIGN_QUOTES_REQUIRED_REGEX, 4),
            _Rule("keyword", kw.FOLLOWED_BY_EQUAL_SIGNS_OPTIONAL_BRACKETS_OPTIONAL_AT_SIGN_QUOTES_REQUIRED_REGEX, 6),
            _Rule("keyword", kw.FOLLOWED_BY_COLON_QUOTES_REQUIRED_REGEX, 5),
            # ours: more key names, and values the plugin's expression skips (a base64 key starting with + or /)
            _Rule("keyword", re.compile(_KEY_ASSIGNED.format("|".join(
                [name for name in kw.DENYLIST if not name.startswith(("db_?pass", "database_?pass", "key_?pass",
                                                                      "pass", "pwd", "contra"))]
                + [_EXTRA_KEY_NAMES])), re.IGNORECASE), 3),
            _Rule("define", _DEFINED, 2, ("define",)),
        )
        # a macro's name ending with a secret-like name (and maybe a number): API_KEY, DB_PASSWORD_2, GITHUB_TOKEN
        self.defined_name = re.compile(f"(?:{'|'.join(kw.DENYLIST)}|{_EXTRA_KEY_NAMES})(?:_?[vV]?\\d+)?\\Z",
                                       re.IGNORECASE)
        self.is_sequential = is_sequential_string
        self.is_uuid = is_potential_uuid
        self.is_templated = is_templated_secret

    def token_rules_for(self, window: str) -> tuple[_Rule, ...]:
        """The token rules to run on a hit line (lowercased): those whose needles it holds, and those with none."""
        present = frozenset(needle for needle in self.needles if needle in window)
        rules = self.rules_for_needles.get(present)
        if rules is None:
            if len(self.rules_for_needles) > 4_096:
                self.rules_for_needles.clear()
            rules = self.rules_for_needles[present] = tuple(
                rule for rule in self.token_rules if not rule.needles or not present.isdisjoint(rule.needles))
        return rules

    def key_shaped(self, value: str) -> bool:
        """A key's value under a key's name (see _KEY_ALPHABET): the name and the value's shape decide, not the
        value's entropy alone (detect-secrets' limit of 4.5 passes no random 16-20 character key)."""
        if not _KEY_ALPHABET.fullmatch(value) or len(set(value)) < 6:
            return False
        digit = any(c.isdigit() for c in value)
        upper = any(c.isupper() for c in value)
        lower = any(c.islower() for c in value)
        if not ((digit and (upper or lower)) or (upper and lower)):
            return False
        if value.startswith(("./", "../", "~/")) or _VERSION.fullmatch(value) or _PLACEHOLDER.search(value):
            return False
        if self.is_sequential(value) or self.is_uuid(value):
            return False
        return set(value) <= _HEX or not _identifier_like(value)

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
    lowered = _ascii_lower(text)
    lines = _merged(_hit_lines(text, (_MARKER,)) + _hit_lines(text, _LOWER_MARKERS, lowered))
    if not lines:
        return []
    found: list[Redaction] = []
    if any("PRIVATE KEY" in text[ls:le] or "PuTTY-User-Key-File" in text[ls:le] for ls, le in lines):
        found.extend(_private_key_spans(text))
    det = _detectors()
    for ls, le in lines:
        window = lowered[ls:le]
        for rule in det.token_rules_for(window):
            for m in rule.regex.finditer(text, ls, le):
                start, end = m.span(rule.group)
                if rule.context and rule.context not in lowered[slice(*_nearby(text, start, end))]:
                    continue
                if rule.detector == "azure_storage_key" and text.startswith("AccountKey=", start):
                    start += len("AccountKey=")
                elif rule.detector == "jwt":
                    if not det.jwt_valid(m.group()):
                        continue
                    end = _JWT_TAIL.match(text, end, le).end()
                elif rule.detector == "discord_token":  # newer tokens' third part is 38 characters, not 27
                    end = _TOKEN_TAIL.match(text, end, le).end()
                elif rule.detector == "uri_password":
                    if not any(ch.isalnum() for ch in m.group(1)) or _URI_TEMPLATED.search(m.group(1)):
                        continue
                elif rule.detector == "aws_key":
                    found.extend(_aws_secrets_near(text, start, end, det))
                found.append(Redaction(start, end, rule.kind, rule.detector))
        for rule in det.keyword_rules:
            if rule.needles and not any(n in window for n in rule.needles):
                continue
            for m in rule.regex.finditer(text, ls, le):
                start, end = m.span(rule.group)
                end = _literal_end(text, start, end, le)
                value = text[start:end]
                if rule.detector == "define":
                    name = det.defined_name.search(m.group(1))
                    if name is None:
                        continue
                    stem = name.group().lower()
                else:
                    stem = m.group(1).lower()
                if stem.startswith(_PASSWORD_STEMS) or "pass" in stem:
                    if det.plausible_password(value, text[start - 1]):
                        found.append(Redaction(start, end, "password", "password"))
                elif det.key_shaped(value):
                    found.append(Redaction(start, end, "key", "keyword_key"))
    return found


def _aws_secrets_near(text: str, start: int, end: int, det: _Detectors) -> list[Redaction]:
    """The AWS secret access keys within 2 lines of the key id at text[start:end] (the second argument of
    Aws::Auth::AWSCredentials, the next field of a struct or config line)."""
    low, high = _nearby(text, start, end)
    return [Redaction(m.start(2), m.end(2), "key", "aws_secret_key")
            for m in det.aws_secret_near.finditer(text, low, high) if _aws_secret_shaped(m.group(2))]


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
        if text[start - 1] == ":" and _URI_USERINFO.search(text, max(0, at - 512), at):
            continue  # scheme://user:password@host: a password (secrets), not a mailbox
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
