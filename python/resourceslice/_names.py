"""Kubernetes' name rules (apimachinery's formats, as the apiserver applies them) and their
messages, in one place for every module that checks a name: the core's validation
(``_pycore.validate``), the pool file, the claim status and device taint rule checks, the
kubelet plugin's registration and metadata.

Depends on nothing of ours, so that any module may use it without taking in the core.
"""

from __future__ import annotations

import re

MAX_DRIVER_LENGTH = 63
MAX_POOL_NAME_LENGTH = 253

BAD_LABEL_NAME = "must be a label name"
BAD_LABEL_VALUE = "must be a label value"
BAD_DNS_LABEL = "must be a DNS label"
BAD_DRIVER = f"must be a DNS subdomain of at most {MAX_DRIVER_LENGTH} characters"
BAD_POOL_NAME = (
    f"pool name must be at most {MAX_POOL_NAME_LENGTH} characters of /-separated DNS subdomains"
)

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: A DNS subdomain as Kubernetes checks it: dot-separated labels, 253 bytes in all, and no
#: limit on one label.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_BODY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def ascii_full(pattern: re.Pattern[str], s: str) -> bool:
    """Whether ``s`` is ASCII and all of it matches ``pattern``."""
    return s.isascii() and pattern.fullmatch(s) is not None


def utf8_len(s: str) -> int:
    """The length the API counts: UTF-8 bytes."""
    return len(s.encode())


def is_dns_label(s: str) -> bool:
    return utf8_len(s) <= 63 and ascii_full(_DNS_LABEL, s)


def is_dns_subdomain(s: str) -> bool:
    return utf8_len(s) <= 253 and ascii_full(_DNS_SUBDOMAIN, s)


def is_driver_name(s: str) -> bool:
    """A driver name, also the domain of an attribute: upper case is allowed (the server
    checks the lower-cased name, and warns)."""
    # ASCII only: Go lower-cases Unicode, where a few non-ASCII letters (the Kelvin sign)
    # become ASCII ones; no driver is named so, and both cores must agree.
    return 0 < utf8_len(s) <= MAX_DRIVER_LENGTH and s.isascii() and is_dns_subdomain(s.lower())


def is_pool_name(s: str) -> bool:
    return 0 < utf8_len(s) <= MAX_POOL_NAME_LENGTH and all(
        is_dns_subdomain(p) for p in s.split("/")
    )


def is_label_value(s: str) -> bool:
    return s == "" or (utf8_len(s) <= 63 and ascii_full(_LABEL_BODY, s))


def is_label_name(s: str) -> bool:
    """apimachinery's IsQualifiedName, a label key (taint keys, binding conditions, condition
    types): ``[prefix/]name``."""
    prefix, slash, name = s.partition("/")
    if not slash:
        prefix, name = "", s
    elif not prefix or not is_dns_subdomain(prefix) or "/" in name:
        return False
    return utf8_len(name) <= 63 and ascii_full(_LABEL_BODY, name)
