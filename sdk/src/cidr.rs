//! CIDRs as the default policy reads them: to check a spec's (`validate`), to tell IPv4 from
//! IPv6, and to know which range lies within which when a NetworkPolicy's `except` lists are
//! built (the API server refuses an except outside its CIDR, or one that is the whole CIDR).
//! Also where an IPv6 address carries an IPv4 one ([`EMBEDDINGS`], [`v4_forms`]): the
//! default policy excepts those forms of every address it blocks, and the host's boundary
//! refuses a NetworkPolicy that reaches them, from this one table.

use crate::prelude::*;

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub v6: bool,
    /// The first address (host bits cleared).
    pub network: u128,
    pub prefix: u8,
    /// The last address (host bits set), kept so that [`Cidr::contains`], which an `except`
    /// list asks of every pair of cuts, is three comparisons.
    last: u128,
}

impl Cidr {
    /// An IPv4 range known when the policy is compiled. `prefix` is at most 32 (a larger one
    /// does not compile as a constant).
    pub(crate) const fn v4(address: [u8; 4], prefix: u8) -> Cidr {
        Cidr::of(false, u32::from_be_bytes(address) as u128, 32, prefix)
    }

    /// An IPv6 range known when the policy is compiled. `prefix` is at most 128.
    pub(crate) const fn v6(address: u128, prefix: u8) -> Cidr {
        Cidr::of(true, address, 128, prefix)
    }

    /// Host bits cleared into `network` and set into `last`.
    const fn of(v6: bool, value: u128, bits: u8, prefix: u8) -> Cidr {
        let host = (bits - prefix) as u32;
        let host_mask = if host == 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        };
        Cidr {
            v6,
            network: value & !host_mask,
            prefix,
            last: value | host_mask,
        }
    }

    /// `10.0.0.0/8`, `fc00::/7`; `None` for anything else. Host bits are cleared, as the API
    /// server's parser does.
    pub fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = text.split_once('/')?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let prefix: u8 = prefix.parse().ok()?;
        let (v6, bits, value) = match address.parse::<IpAddr>().ok()? {
            IpAddr::V4(a) => (false, 32, u128::from(u32::from(a))),
            IpAddr::V6(a) => (true, 128, u128::from(a)),
        };
        if prefix > bits {
            return None;
        }
        Some(Cidr::of(v6, value, bits, prefix))
    }

    /// Every address of `other` is in `self`.
    pub fn contains(self, other: Cidr) -> bool {
        self.v6 == other.v6 && self.network <= other.network && other.last <= self.last
    }
}

impl Cidr {
    /// The last address of the range.
    pub const fn last(self) -> u128 {
        self.last
    }

    /// The IPv6 ranges that carry this IPv4 range's addresses, one per [`EMBEDDINGS`] in its
    /// order; none for an IPv6 range.
    pub fn v4_forms(self) -> Option<[Cidr; EMBEDDINGS.len()]> {
        if self.v6 {
            return None;
        }
        // The range's addresses fit in 32 bits: a v4 `Cidr` holds nothing wider.
        let first = self.network as u32;
        let last = self.last as u32;
        let host_bits = 32 - u32::from(self.prefix);
        Some(core::array::from_fn(|i| {
            let (network, _) = v4_forms(first, last)[i];
            let prefix = 128 - (host_bits + EMBEDDINGS[i].shift);
            Cidr::v6(network, prefix as u8)
        }))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", Ipv6Addr::from(self.network), self.prefix)
        } else {
            let address = Ipv4Addr::from(u32::try_from(self.network).unwrap_or(u32::MAX));
            write!(f, "{address}/{}", self.prefix)
        }
    }
}

/// One way an IPv6 address carries an IPv4 address: a fixed prefix, with the IPv4 address
/// shifted left by `shift` bits under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embedding {
    /// What it is called, for a message.
    pub name: &'static str,
    /// The prefix's bits (zero under the IPv4 address and below it).
    pub prefix: u128,
    /// How far the IPv4 address sits from the address's last bit.
    pub shift: u32,
}

/// Every IPv6 form that carries an IPv4 address at a fixed place, which a translator, a
/// tunnel or a dual-stack socket takes to that IPv4 address: whatever blocks an IPv4 address
/// blocks each of these forms of it too.
pub const EMBEDDINGS: [Embedding; 5] = [
    Embedding {
        name: "IPv4-mapped (::ffff:0:0/96)",
        prefix: 0xffff << 32,
        shift: 0,
    },
    Embedding {
        name: "IPv4-translated (::ffff:0:0:0/96)",
        prefix: 0xffff << 48,
        shift: 0,
    },
    Embedding {
        name: "IPv4-compatible (::/96)",
        prefix: 0,
        shift: 0,
    },
    Embedding {
        name: "NAT64 (64:ff9b::/96)",
        prefix: 0x64_ff9b << 96,
        shift: 0,
    },
    Embedding {
        name: "6to4 (2002::/16)",
        prefix: 0x2002 << 112,
        shift: 80,
    },
];

/// NAT64's local-use prefix (`64:ff9b:1::/48`, RFC 8215): where in it an IPv4 address sits is
/// the operator's choice, so all of it stands for every IPv4 address.
pub const NAT64_LOCAL: Cidr = Cidr::v6(0x64_ff9b_0001 << 80, 48);

/// The IPv6 addresses that carry the IPv4 addresses `first..=last`, as the first and last
/// address of a range per [`EMBEDDINGS`], in its order: the one function that says where an
/// IPv4 address hides in an IPv6 one.
pub const fn v4_forms(first: u32, last: u32) -> [(u128, u128); EMBEDDINGS.len()] {
    let mut forms = [(0, 0); EMBEDDINGS.len()];
    let mut i = 0;
    while i < EMBEDDINGS.len() {
        let Embedding { prefix, shift, .. } = EMBEDDINGS[i];
        let below = (1u128 << shift) - 1;
        forms[i] = (
            prefix | ((first as u128) << shift),
            prefix | ((last as u128) << shift) | below,
        );
        i += 1;
    }
    forms
}

/// `cuts` that lie inside `cidr` and are smaller than it, each once and none inside another:
/// a valid `except` list, borrowing the cuts' texts. `None` when one cut covers the whole
/// CIDR (nothing of it is left).
pub fn excepts<T: Copy>(cidr: Cidr, cuts: &[(Cidr, T)]) -> Option<Vec<T>> {
    if cuts.iter().any(|(cut, _)| cut.contains(cidr)) {
        return None;
    }
    let mut kept = Vec::new();
    for (i, (cut, text)) in cuts.iter().enumerate() {
        if !cidr.contains(*cut) {
            continue;
        }
        // Covered by another cut (the first of equal ones is kept). A cut that holds this one
        // lies inside `cidr` too: it cannot hold `cidr` (refused above), and two CIDRs that
        // overlap are nested.
        let covered = cuts
            .iter()
            .enumerate()
            .any(|(j, (other, _))| j != i && other.contains(*cut) && (*other != *cut || j < i));
        if !covered {
            kept.push(*text);
        }
    }
    Some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(text: &str) -> Cidr {
        Cidr::parse(text).unwrap()
    }

    #[test]
    fn parses_and_contains() {
        assert!(c("10.0.0.0/8").contains(c("10.1.2.0/24")));
        assert!(!c("10.1.2.0/24").contains(c("10.0.0.0/8")));
        assert!(!c("0.0.0.0/0").contains(c("::/0")));
        assert_eq!(c("10.1.2.3/8"), c("10.0.0.0/8"));
        // The ends of a range are in it; the addresses either side are not.
        assert!(c("10.0.0.0/8").contains(c("10.255.255.255/32")));
        assert!(!c("10.0.0.0/8").contains(c("11.0.0.0/32")));
        assert!(!c("10.0.0.0/8").contains(c("9.255.255.255/32")));
        assert!(c("0.0.0.0/0").contains(c("255.255.255.255/32")));
        assert!(c("::/0").contains(c("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")));
        assert!(c("fc00::/7").contains(c("fdff::/16")));
        assert!(!c("fc00::/7").contains(c("fe00::/16")));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "::/129",
            "x/1",
            "1.2.3.4/-1",
            "1.2.3.4/ 8",
        ] {
            assert!(Cidr::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn excepts_are_inside_smaller_and_minimal() {
        let all = c("0.0.0.0/0");
        let cuts = [
            (c("10.0.0.0/8"), "10.0.0.0/8"),
            (c("10.244.0.0/16"), "10.244.0.0/16"),
            (c("fc00::/7"), "fc00::/7"),
            (c("10.0.0.0/8"), "10.0.0.0/8"),
        ];
        assert_eq!(excepts(all, &cuts), Some(vec!["10.0.0.0/8"]));
        assert_eq!(excepts(c("10.244.0.0/16"), &cuts), None);
        assert_eq!(excepts(c("8.8.8.0/24"), &cuts), Some(Vec::new()));
        // A cut that holds another lies inside the CIDR itself, or the CIDR had nothing left.
        let nested = [
            (c("10.244.1.0/24"), "10.244.1.0/24"),
            (c("10.244.0.0/16"), "10.244.0.0/16"),
            (c("10.244.0.0/16"), "10.244.0.7/16"),
        ];
        assert_eq!(
            excepts(c("10.0.0.0/8"), &nested),
            Some(vec!["10.244.0.0/16"])
        );
        assert_eq!(excepts(c("10.244.1.0/24"), &nested), None);
    }

    /// Each embedding of an IPv4 range, as its text: the table every except list and every
    /// boundary check of the translated forms is made from.
    #[test]
    fn each_ipv4_range_in_every_form_that_carries_it() {
        let forms = |text: &str| -> Vec<String> {
            c(text)
                .v4_forms()
                .expect("an IPv4 range")
                .iter()
                .map(|f| f.to_string())
                .collect()
        };
        assert_eq!(
            forms("169.254.169.254/32"),
            [
                "::ffff:169.254.169.254/128",
                "::ffff:0:a9fe:a9fe/128",
                "::a9fe:a9fe/128",
                "64:ff9b::a9fe:a9fe/128",
                "2002:a9fe:a9fe::/48",
            ]
        );
        assert_eq!(
            forms("10.0.0.0/8"),
            [
                "::ffff:10.0.0.0/104",
                "::ffff:0:a00:0/104",
                "::a00:0/104",
                "64:ff9b::a00:0/104",
                "2002:a00::/24",
            ]
        );
        assert_eq!(
            forms("0.0.0.0/0"),
            [
                "::ffff:0.0.0.0/96",
                "::ffff:0:0:0/96",
                "::/96",
                "64:ff9b::/96",
                "2002::/16",
            ]
        );
        assert_eq!(c("fe80::/10").v4_forms(), None);
        // Each form parses back to itself, and holds the address it carries, at its place.
        for (i, form) in c("192.168.0.0/16").v4_forms().unwrap().iter().enumerate() {
            assert_eq!(Cidr::parse(&form.to_string()), Some(*form), "{form}");
            let (first, last) = v4_forms(0xc0a8_0000, 0xc0a8_ffff)[i];
            assert_eq!((form.network, form.last()), (first, last), "{form}");
            let carried = (first >> EMBEDDINGS[i].shift) as u32;
            assert_eq!(carried, 0xc0a8_0000, "{}", EMBEDDINGS[i].name);
        }
        assert_eq!(NAT64_LOCAL, c("64:ff9b:1::/48"));
    }

    /// A range made by the constant constructors is the one its text parses to.
    #[test]
    fn constant_ranges_are_their_text() {
        assert_eq!(Cidr::v4([10, 1, 2, 3], 8), c("10.0.0.0/8"));
        assert_eq!(Cidr::v4([0, 0, 0, 0], 0), c("0.0.0.0/0"));
        assert_eq!(Cidr::v4([1, 2, 3, 4], 32), c("1.2.3.4/32"));
        assert_eq!(Cidr::v6(0, 0), c("::/0"));
        assert_eq!(Cidr::v6(0xfe80 << 112, 10), c("fe80::/10"));
        assert_eq!(
            Cidr::v6(u128::MAX, 128),
            c("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")
        );
    }
}
