//! CIDRs as the default policy reads them: to check a spec's (`validate`), to tell IPv4 from
//! IPv6, and to know which range lies within which when a NetworkPolicy's `except` lists are
//! built (the API server refuses an except outside its CIDR, or one that is the whole CIDR).

use crate::prelude::*;

use core::net::IpAddr;

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

/// `cuts` that lie inside `cidr` and are smaller than it, each once and none inside another:
/// a valid `except` list, borrowing the cuts' texts. `None` when one cut covers the whole
/// CIDR (nothing of it is left).
pub fn excepts<'t>(cidr: Cidr, cuts: &[(Cidr, &'t str)]) -> Option<Vec<&'t str>> {
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
