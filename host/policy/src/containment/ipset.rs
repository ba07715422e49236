//! Sets of IP addresses as sorted, disjoint, inclusive `u128` intervals, IPv4 and IPv6 apart:
//! what a NetworkPolicy's `ipBlock` peers reach, and what a sandbox's spec allows, so that the
//! boundary can ask "is this within that" by arithmetic rather than by comparing strings.

use std::fmt;
use std::net::IpAddr;

use cubepod_policy_sdk::cidr::{self, EMBEDDINGS};

/// Why a CIDR does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{cidr:?} is not a CIDR ({why})")]
pub struct CidrError {
    pub(crate) cidr: String,
    pub(crate) why: &'static str,
}

/// One CIDR: its family and the interval of addresses it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub(crate) v6: bool,
    pub(crate) first: u128,
    pub(crate) last: u128,
}

impl Cidr {
    /// `10.0.0.0/8`, `fc00::/7`. Host bits are masked away, as the API server's parser does.
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let fail = |why| CidrError {
            cidr: super::clip(text, 64),
            why,
        };
        let (address, prefix) = text.split_once('/').ok_or_else(|| fail("no /prefix"))?;
        let address: IpAddr = address.parse().map_err(|_| fail("not an IP address"))?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return Err(fail("the prefix is not a number"));
        }
        let prefix: u32 = prefix
            .parse()
            .map_err(|_| fail("the prefix is not a number"))?;
        let (v6, bits, value) = match address {
            IpAddr::V4(a) => (false, 32, u128::from(u32::from(a))),
            IpAddr::V6(a) => (true, 128, u128::from(a)),
        };
        if prefix > bits {
            return Err(fail("the prefix is longer than the address"));
        }
        let host_bits = bits - prefix;
        let host_mask = if host_bits == 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let first = value & !host_mask;
        Ok(Cidr {
            v6,
            first,
            last: first | host_mask,
        })
    }
}

/// A set of addresses of both families.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpSet {
    v4: Vec<(u128, u128)>,
    v6: Vec<(u128, u128)>,
}

impl IpSet {
    /// The addresses of one CIDR.
    pub fn of(cidr: Cidr) -> IpSet {
        let mut set = IpSet::default();
        set.family_mut(cidr.v6).push((cidr.first, cidr.last));
        set
    }

    fn family_mut(&mut self, v6: bool) -> &mut Vec<(u128, u128)> {
        if v6 { &mut self.v6 } else { &mut self.v4 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// The addresses in either set.
    pub fn union(&self, other: &IpSet) -> IpSet {
        IpSet {
            v4: union(&self.v4, &other.v4),
            v6: union(&self.v6, &other.v6),
        }
    }

    pub(crate) fn minus(&self, other: &IpSet) -> IpSet {
        IpSet {
            v4: minus(&self.v4, &other.v4),
            v6: minus(&self.v6, &other.v6),
        }
    }

    /// Every address of `self` is in `other`.
    pub(crate) fn is_subset(&self, other: &IpSet) -> bool {
        self.minus(other).is_empty()
    }

    /// Some address of `self` is in `other`.
    pub(crate) fn intersects(&self, other: &IpSet) -> bool {
        self.minus(other) != *self
    }

    /// `self` with each of its IPv4 ranges also in every IPv6 form that carries an IPv4
    /// address (the SDK's table, `cidr::EMBEDDINGS`: IPv4-mapped, -translated and
    /// -compatible, NAT64's well-known prefix, 6to4). A parser that reads a mapped address as
    /// the IPv4 one, a NAT64 gateway or a 6to4 relay takes such an address to the IPv4 one it
    /// carries.
    pub(crate) fn with_v4_forms(&self) -> IpSet {
        let mut carried = Vec::with_capacity(self.v4.len() * EMBEDDINGS.len());
        for &(first, last) in &self.v4 {
            // An IPv4 interval's ends fit in 32 bits: `IpSet::of` puts nothing wider there.
            let (first, last) = (first as u32, last as u32);
            carried.extend(cidr::v4_forms(first, last));
        }
        let mut forms = self.clone();
        forms.v6 = union(&forms.v6, &carried);
        forms
    }
}

/// NAT64's local-use prefix (`64:ff9b:1::/48`, RFC 8215): where in it an IPv4 address sits is
/// the operator's choice, so none of it can be read as one.
pub(crate) const NAT64_LOCAL: Cidr = Cidr {
    v6: true,
    first: cidr::NAT64_LOCAL.network,
    last: cidr::NAT64_LOCAL.last(),
};

impl Cidr {
    /// The IPv4 range a CIDR inside one of the forms that carry an IPv4 address at a fixed
    /// place (`cidr::EMBEDDINGS`) carries; `None` for any other.
    pub(crate) fn carried_v4(self) -> Option<Cidr> {
        if !self.v6 {
            return None;
        }
        let shift = carrier_shift(self)?;
        Some(Cidr {
            v6: false,
            first: (self.first >> shift) & u128::from(u32::MAX),
            last: (self.last >> shift) & u128::from(u32::MAX),
        })
    }

    /// Every address of `other` is in `self`.
    pub(crate) fn contains(self, other: Cidr) -> bool {
        self.v6 == other.v6 && self.first <= other.first && other.last <= self.last
    }
}

/// How far the IPv4 address sits in the form of `cidr` (an IPv6 CIDR inside the range of
/// one form that carries every IPv4 address), if it is inside one.
fn carrier_shift(cidr: Cidr) -> Option<u32> {
    EMBEDDINGS
        .iter()
        .zip(cidr::v4_forms(0, u32::MAX))
        .find_map(|(e, (low, high))| (low <= cidr.first && cidr.last <= high).then_some(e.shift))
}

impl IpSet {
    /// The IPv4 addresses that the parts of `self` within `carrier` (a CIDR inside one of the
    /// forms that carry an IPv4 address, [`Cidr::carried_v4`]) carry.
    pub(crate) fn carried_v4(&self, carrier: Cidr) -> IpSet {
        let Some(shift) = carrier_shift(carrier) else {
            return IpSet::default();
        };
        let low = u128::from(u32::MAX);
        let v4 = self
            .v6
            .iter()
            .filter(|&&(first, last)| first >= carrier.first && last <= carrier.last)
            .map(|&(first, last)| ((first >> shift) & low, (last >> shift) & low))
            .collect::<Vec<_>>();
        IpSet {
            v4: union(&v4, &[]),
            v6: Vec::new(),
        }
    }
}

/// Sorted, merged intervals of both lists (adjacent ones joined).
fn union(a: &[(u128, u128)], b: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let mut all: Vec<(u128, u128)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(all.len());
    for (first, last) in all {
        match out.last_mut() {
            Some((_, end)) if first <= end.saturating_add(1) => *end = (*end).max(last),
            _ => out.push((first, last)),
        }
    }
    out
}

/// `a` without `b`; both sorted and disjoint (as `union` leaves them).
fn minus(a: &[(u128, u128)], b: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    for &(first, last) in a {
        let mut start = first;
        let mut open = true;
        for &(cut_first, cut_last) in b {
            if cut_last < start || cut_first > last {
                continue;
            }
            if cut_first > start {
                out.push((start, cut_first - 1));
            }
            if cut_last >= last {
                open = false;
                break;
            }
            start = cut_last + 1;
        }
        if open {
            out.push((start, last));
        }
    }
    out
}

impl fmt::Display for IpSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v4 = self.v4.iter().map(|&(a, b)| {
            let ip = |x: u128| std::net::Ipv4Addr::from(u32::try_from(x).unwrap_or(u32::MAX));
            format!("{}-{}", ip(a), ip(b))
        });
        let v6 = self.v6.iter().map(|&(a, b)| {
            format!(
                "{}-{}",
                std::net::Ipv6Addr::from(a),
                std::net::Ipv6Addr::from(b)
            )
        });
        let all: Vec<String> = v4.chain(v6).collect();
        if all.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&all.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cidrs: &[&str]) -> IpSet {
        cidrs
            .iter()
            .map(|c| IpSet::of(Cidr::parse(c).unwrap()))
            .fold(IpSet::default(), |a, b| a.union(&b))
    }

    #[test]
    fn cidrs_parse_and_mask_host_bits() {
        let c = Cidr::parse("10.1.2.3/8").unwrap();
        assert_eq!((c.first, c.last), (10 << 24, (11 << 24) - 1));
        let all = Cidr::parse("::/0").unwrap();
        assert_eq!((all.v6, all.first, all.last), (true, 0, u128::MAX));
        let one = Cidr::parse("169.254.169.254/32").unwrap();
        assert_eq!(one.first, one.last);
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0/8",
            "x/8",
            "10.0.0.0/",
            "::/129",
            "1.2.3.4/+1",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn set_arithmetic() {
        let internet = set(&["0.0.0.0/0"]).minus(&set(&["10.0.0.0/8", "192.168.0.0/16"]));
        assert!(set(&["8.8.8.8/32"]).is_subset(&internet));
        assert!(!set(&["10.1.0.0/16"]).is_subset(&internet));
        assert!(!set(&["0.0.0.0/0"]).is_subset(&internet));
        // A range that straddles a hole is not within.
        assert!(!set(&["10.0.0.0/7"]).is_subset(&internet));
        assert!(set(&["11.0.0.0/8", "9.0.0.0/8"]).is_subset(&internet));
        // Families apart: an IPv6 range is never within an IPv4-only set.
        assert!(!set(&["::/0"]).is_subset(&internet));
        // Adjacent ranges join, and a subtraction of everything leaves nothing.
        let joined = set(&["10.0.0.0/9", "10.128.0.0/9"]);
        assert_eq!(joined, set(&["10.0.0.0/8"]));
        assert!(joined.minus(&set(&["10.0.0.0/8"])).is_empty());
        assert!(set(&["10.0.0.0/8"]).minus(&set(&["10.0.0.0/9"])) == set(&["10.128.0.0/9"]));
        assert!(set(&["10.0.0.0/8"]).intersects(&set(&["10.1.0.0/16"])));
        assert!(!set(&["10.0.0.0/8"]).intersects(&set(&["11.0.0.0/8", "::/0"])));
    }

    #[test]
    fn ipv4_ranges_in_every_form_that_carries_them() {
        let metadata = set(&["169.254.169.254/32"]).with_v4_forms();
        for form in [
            "169.254.169.254/32",
            "::169.254.169.254/128",
            "::ffff:0:a9fe:a9fe/128",
            "2002:a9fe:a9fe::/48",
            "2002:a9fe:a9fe:1::/64",
            "::ffff:169.254.169.254/128",
            "::ffff:a9fe:a9fe/128",
            "64:ff9b::169.254.169.254/128",
            "64:ff9b::a9fe:a9fe/128",
        ] {
            assert!(set(&[form]).is_subset(&metadata), "{form}");
        }
        assert!(!set(&["::ffff:8.8.8.8/128"]).intersects(&metadata));
        assert!(set(&["::ffff:0:0/96"]).intersects(&metadata));
        assert!(set(&["64:ff9b::/64"]).intersects(&metadata));
        // What a CIDR inside a carrier carries; none for any other.
        let carried = |text: &str| Cidr::parse(text).unwrap().carried_v4();
        assert_eq!(
            carried("::ffff:10.0.0.0/104"),
            Some(Cidr::parse("10.0.0.0/8").unwrap())
        );
        assert_eq!(
            carried("64:ff9b::a9fe:a9fe/128"),
            Some(Cidr::parse("169.254.169.254/32").unwrap())
        );
        assert_eq!(
            carried("64:ff9b::/96"),
            Some(Cidr::parse("0.0.0.0/0").unwrap())
        );
        assert_eq!(
            carried("2002:a00::/24"),
            Some(Cidr::parse("10.0.0.0/8").unwrap())
        );
        assert_eq!(
            carried("::a9fe:a9fe/128"),
            Some(Cidr::parse("169.254.169.254/32").unwrap())
        );
        assert!(!set(&["2002:808:808::/48"]).intersects(&metadata));
        assert_eq!(carried("64:ff9b::/64"), None);
        assert_eq!(carried("::/0"), None);
        assert_eq!(carried("10.0.0.0/8"), None);
        assert_eq!(carried("2001:db8::/32"), None);
        let local = NAT64_LOCAL;
        assert!(local.contains(Cidr::parse("64:ff9b:1:a9fe:a9::/80").unwrap()));
        assert_eq!(local, Cidr::parse("64:ff9b:1::/48").unwrap());
        assert!(!local.contains(Cidr::parse("64:ff9b::/96").unwrap()));
    }
}
