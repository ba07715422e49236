"""CIDRs as the default policy reads them: to check a spec's, to tell IPv4 from IPv6, and to
know which range lies within which when a NetworkPolicy's `except` lists are built. Addresses
are parsed and written as the Rust SDK (Rust's std) parses and writes them, so that both write
the same manifests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Cidr:
    v6: bool
    #: The first address (host bits cleared).
    network: int
    prefix: int
    #: The last address (host bits set).
    last: int

    @staticmethod
    def of(v6: bool, value: int, prefix: int) -> "Cidr":
        bits = 128 if v6 else 32
        host_mask = (1 << (bits - prefix)) - 1
        return Cidr(v6, value & ~host_mask, prefix, value | host_mask)

    @staticmethod
    def parse(text: str) -> Optional["Cidr"]:
        """`10.0.0.0/8`, `fc00::/7`; None for anything else. Host bits are cleared."""
        address, slash, prefix = text.partition("/")
        if not slash or not prefix or len(prefix) > 3 or not _digits(prefix):
            return None
        prefix_len = int(prefix)
        parsed = _parse_ip(address)
        if parsed is None:
            return None
        v6, value = parsed
        if prefix_len > (128 if v6 else 32):
            return None
        return Cidr.of(v6, value, prefix_len)

    def contains(self, other: "Cidr") -> bool:
        """Every address of `other` is in `self`."""
        return self.v6 == other.v6 and self.network <= other.network and other.last <= self.last

    def v4_forms(self) -> Optional[List["Cidr"]]:
        """The IPv6 ranges that carry this IPv4 range's addresses, one per EMBEDDINGS entry."""
        if self.v6:
            return None
        host_bits = 32 - self.prefix
        out = []
        for (network, _), (_, _, shift) in zip(v4_forms(self.network, self.last), EMBEDDINGS):
            out.append(Cidr.of(True, network, 128 - (host_bits + shift)))
        return out

    def __str__(self) -> str:
        if self.v6:
            return f"{format_v6(self.network)}/{self.prefix}"
        return f"{format_v4(self.network)}/{self.prefix}"


#: Each IPv6 form that carries an IPv4 address: (name, prefix bits, shift).
EMBEDDINGS: Tuple[Tuple[str, int, int], ...] = (
    ("IPv4-mapped (::ffff:0:0/96)", 0xFFFF << 32, 0),
    ("IPv4-translated (::ffff:0:0:0/96)", 0xFFFF << 48, 0),
    ("IPv4-compatible (::/96)", 0, 0),
    ("NAT64 (64:ff9b::/96)", 0x64_FF9B << 96, 0),
    ("6to4 (2002::/16)", 0x2002 << 112, 80),
)

#: NAT64's local-use prefix (`64:ff9b:1::/48`): all of it stands for every IPv4 address.
NAT64_LOCAL = Cidr.of(True, 0x64_FF9B_0001 << 80, 48)


def v4_forms(first: int, last: int) -> List[Tuple[int, int]]:
    """The IPv6 addresses that carry the IPv4 addresses first..=last, per EMBEDDINGS."""
    forms = []
    for _, prefix, shift in EMBEDDINGS:
        below = (1 << shift) - 1
        forms.append((prefix | (first << shift), prefix | (last << shift) | below))
    return forms


def excepts(cidr: Cidr, cuts: Sequence[Tuple[Cidr, T]]) -> Optional[List[T]]:
    """The cuts inside `cidr` and smaller than it, each once and none inside another: a valid
    `except` list. None when one cut covers the whole CIDR.

    Ranges either nest or are apart, so a cut is covered when a cut before it in the order of
    (family, first address, last address from the widest) reaches as far; equal cuts are ordered
    by their place, so that the first is kept. One sort and one pass, not every cut against
    every other: the internet egress has some 120 cuts, and an interpreter pays for each test."""
    if any(cut.contains(cidr) for cut, _ in cuts):
        return None
    order = sorted(
        range(len(cuts)),
        key=lambda i: (cuts[i][0].v6, cuts[i][0].network, -cuts[i][0].last, i),
    )
    covered = [False] * len(cuts)
    reach: Optional[Tuple[bool, int]] = None
    for i in order:
        cut = cuts[i][0]
        if reach is not None and reach[0] == cut.v6 and reach[1] >= cut.last:
            covered[i] = True
        else:
            reach = (cut.v6, cut.last)
    return [text for i, (cut, text) in enumerate(cuts) if cidr.contains(cut) and not covered[i]]


def _digits(text: str) -> bool:
    return text != "" and all("0" <= c <= "9" for c in text)


def format_v4(value: int) -> str:
    return ".".join(str((value >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def format_v6(value: int) -> str:
    """As Rust's `Ipv6Addr` displays it: IPv4-mapped addresses with their IPv4 address, else
    the longest run (of two or more) of zero groups as `::`."""
    segments = [(value >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
    if segments[:6] == [0, 0, 0, 0, 0, 0xFFFF]:
        return "::ffff:" + format_v4(value & 0xFFFF_FFFF)
    best_start, best_len, start, length = 0, 0, 0, 0
    for i, segment in enumerate(segments):
        if segment == 0:
            if length == 0:
                start = i
            length += 1
            if length > best_len:
                best_start, best_len = start, length
        else:
            length = 0
    hexes = ["%x" % s for s in segments]
    if best_len > 1:
        return ":".join(hexes[:best_start]) + "::" + ":".join(hexes[best_start + best_len:])
    return ":".join(hexes)


class _Parser:
    """Rust's `core::net` address parser, step for step: what it accepts, this accepts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def char(self, c: str) -> bool:
        if self.peek() == c:
            self.at += 1
            return True
        return False

    def number(self, radix: int, max_digits: int, allow_zero_prefix: bool) -> Optional[int]:
        start = self.at
        digits = "0123456789abcdefABCDEF"[: 10 if radix == 10 else 22]
        value = 0
        count = 0
        while count < max_digits and self.peek() != "" and self.peek() in digits:
            value = value * radix + int(self.peek(), radix)
            self.at += 1
            count += 1
        if count == 0:
            self.at = start
            return None
        if not allow_zero_prefix and count > 1 and self.text[start] == "0":
            self.at = start
            return None
        return value

    def ipv4(self) -> Optional[int]:
        start = self.at
        value = 0
        for i in range(4):
            if i > 0 and not self.char("."):
                self.at = start
                return None
            octet = self.number(10, 3, False)
            if octet is None or octet > 255:
                self.at = start
                return None
            value = (value << 8) | octet
        return value

    def groups(self, limit: int) -> Tuple[List[int], bool]:
        groups: List[int] = []
        while len(groups) < limit:
            i = len(groups)
            if i < limit - 1:
                start = self.at
                if i == 0 or self.char(":"):
                    v4 = self.ipv4()
                    if v4 is not None:
                        return groups + [v4 >> 16, v4 & 0xFFFF], True
                self.at = start
            start = self.at
            if i > 0 and not self.char(":"):
                return groups, False
            group = self.number(16, 4, True)
            if group is None:
                self.at = start
                return groups, False
            groups.append(group)
        return groups, False

    def ipv6(self) -> Optional[int]:
        head, head_v4 = self.groups(8)
        if len(head) == 8:
            return _join(head)
        if head_v4:
            return None
        if not (self.char(":") and self.char(":")):
            return None
        tail, _ = self.groups(8 - (len(head) + 1))
        return _join(head + [0] * (8 - len(head) - len(tail)) + tail)


def _join(groups: List[int]) -> int:
    value = 0
    for g in groups:
        value = (value << 16) | g
    return value


def _parse_ip(text: str) -> Optional[Tuple[bool, int]]:
    p = _Parser(text)
    v4 = p.ipv4()
    if v4 is not None and p.at == len(text):
        return False, v4
    p = _Parser(text)
    v6 = p.ipv6()
    if v6 is not None and p.at == len(text):
        return True, v6
    return None
