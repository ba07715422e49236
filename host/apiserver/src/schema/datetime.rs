//! `format: date-time` as the API server checks it (kube-openapi's `strfmt.IsDateTime`): a full
//! date, `T` (either case), a time with optional fraction, and `Z` or a `±hh:mm` offset.

/// Whether `text` is an RFC 3339 date-time by kube-openapi's reading.
pub(crate) fn is_date_time(text: &str) -> bool {
    if text.len() < 4 {
        return false;
    }
    let lower = text.to_ascii_lowercase();
    // As Go's strings.Split on "t": the date, then the part up to any next `t`.
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    is_date(date) && is_time(time)
}

/// `^([0-9]{4})-([0-9]{2})-([0-9]{2})`, month 01-12, day 01-31.
fn is_date(date: &str) -> bool {
    let bytes = date.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return false;
    }
    let digits = |range: std::ops::Range<usize>| bytes[range].iter().all(u8::is_ascii_digit);
    if !(digits(0..4) && digits(5..7) && digits(8..10)) {
        return false;
    }
    let (month, day) = (&date[5..7], &date[8..10]);
    ("01"..="12").contains(&month) && ("01"..="31").contains(&day)
}

/// `^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$`, hours to 23,
/// minutes and seconds to 59.
fn is_time(time: &str) -> bool {
    let bytes = time.as_bytes();
    if bytes.len() < 9 || bytes[2] != b':' || bytes[5] != b':' {
        return false;
    }
    let two = |at: usize| bytes[at].is_ascii_digit() && bytes[at + 1].is_ascii_digit();
    if !(two(0) && two(3) && two(6)) {
        return false;
    }
    if &time[0..2] > "23" || &time[3..5] > "59" || &time[6..8] > "59" {
        return false;
    }
    let mut rest = &bytes[8..];
    // `.` in the pattern is any character, then at least one digit.
    if rest.len() > 1 && rest[0] != b'z' && rest[0] != b'+' && rest[0] != b'-' {
        let digits = rest[1..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[1 + digits..];
    }
    match rest {
        [b'z'] => true,
        [sign, h1, h2, b':', m1, m2] => {
            matches!(sign, b'+' | b'-') && [h1, h2, m1, m2].iter().all(|b| b.is_ascii_digit())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_date_times_pass_and_others_fail() {
        for good in [
            "2026-01-01T00:00:00Z",
            "2026-12-31t23:59:59z",
            "2026-01-01T00:00:00.123456Z",
            "2026-01-01T10:00:00+02:00",
            "2026-01-01T10:00:00.5-07:30",
        ] {
            assert!(is_date_time(good), "{good}");
        }
        for bad in [
            "tomorrow",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+0200",
            "",
        ] {
            assert!(!is_date_time(bad), "{bad}");
        }
    }
}
