//! RFC 3339 timestamps of the API, as the contract's seconds since the epoch.

use jiff::Timestamp;

/// Now, in seconds since the epoch.
pub fn now() -> i64 {
    Timestamp::now().as_second()
}

/// An RFC 3339 timestamp in seconds since the epoch.
pub fn parse(text: &str) -> Result<i64, String> {
    text.parse::<Timestamp>()
        .map(|t| t.as_second())
        .map_err(|e| format!("{text:?} is not an RFC 3339 time: {e}"))
}

/// Seconds since the epoch as an RFC 3339 timestamp.
pub fn format(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| Timestamp::UNIX_EPOCH.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_seconds() {
        let t = super::parse("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(super::format(t), "2026-01-01T00:00:00Z");
        assert!(super::parse("yesterday").is_err());
    }
}
