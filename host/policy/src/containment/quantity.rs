//! The value of a Kubernetes quantity ("10Gi", "1.5T", "5e9"), exactly: integers scaled by the
//! suffix, never a float, so that a size just past a bound cannot round under it.

/// Why a text is not a quantity the boundary can compare.
/// Why a text is not a quantity the host can compare.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not the syntax of a Kubernetes quantity.
    #[error("is not a Kubernetes quantity")]
    Syntax,
    /// Below zero.
    #[error("is negative")]
    Negative,
    /// Past what a `u128` of the unit holds.
    #[error("is too large to compare")]
    TooLarge,
}

/// Bytes as a user writes a size: with the largest binary suffix that divides them exactly
/// (`1Ti`, `1536Mi`), else as a plain number.
pub fn format_bytes(bytes: u128) -> String {
    const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    for (i, suffix) in SUFFIXES.iter().enumerate() {
        let unit = 1u128 << (10 * (SUFFIXES.len() - i));
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// The quantity in whole units, rounded up ("1.5" is 2, "1m" is 1): a storage request is
/// compared in bytes, and rounding up never lets a request slip under a bound.
pub fn parse_ceil(text: &str) -> Result<u128, QuantityError> {
    parse_scaled(text, 0)
}

/// The quantity in thousandths, rounded up ("1.5" is 1500, "1m" is 1, "1u" is 1): CPU is
/// compared in millicores, the finest unit Kubernetes keeps.
pub fn parse_ceil_milli(text: &str) -> Result<u128, QuantityError> {
    parse_scaled(text, 3)
}

/// Millicores as a user writes CPU: whole cores where they are (`16`), else `1500m`.
pub(crate) fn format_milli(milli: u128) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// The quantity times 10^`shift`, rounded up.
fn parse_scaled(text: &str, shift: i32) -> Result<u128, QuantityError> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(QuantityError::Syntax);
    }
    let (base, exponent) = scale(suffix)?;
    // The digits as one integer over 10^len(fraction); leading zeros cost nothing.
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative);
    }
    if digits.len() > 38 {
        return Err(QuantityError::TooLarge);
    }
    let mantissa: u128 = digits.parse().map_err(|_| QuantityError::Syntax)?;
    let fraction_digits = i32::try_from(fraction.len()).map_err(|_| QuantityError::TooLarge)?;
    let (mut numerator, mut denominator) = (mantissa, 1u128);
    let power = |base: u128, n: i32| -> Result<u128, QuantityError> {
        let n = u32::try_from(n).map_err(|_| QuantityError::TooLarge)?;
        base.checked_pow(n).ok_or(QuantityError::TooLarge)
    };
    match base {
        2 => {
            numerator = numerator
                .checked_mul(power(2, exponent)?)
                .and_then(|n| n.checked_mul(10u128.checked_pow(shift.unsigned_abs())?))
                .ok_or(QuantityError::TooLarge)?
        }
        _ => {
            let exponent = exponent - fraction_digits + shift;
            if exponent >= 0 {
                numerator = numerator
                    .checked_mul(power(10, exponent)?)
                    .ok_or(QuantityError::TooLarge)?;
            } else {
                denominator = power(10, -exponent)?;
            }
        }
    }
    if base == 2 && fraction_digits > 0 {
        denominator = power(10, fraction_digits)?;
    }
    Ok(numerator.div_ceil(denominator))
}

/// The suffix as (base, exponent): binary Ki..Ei, decimal n..E, or an `e` exponent.
fn scale(suffix: &str) -> Result<(u128, i32), QuantityError> {
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [(&str, i32); 10] = [
        ("n", -9),
        ("u", -6),
        ("m", -3),
        ("", 0),
        ("k", 3),
        ("M", 6),
        ("G", 9),
        ("T", 12),
        ("P", 15),
        ("E", 18),
    ];
    if let Some(index) = BINARY.iter().position(|s| *s == suffix) {
        let index = i32::try_from(index).map_err(|_| QuantityError::Syntax)?;
        return Ok((2, 10 * (index + 1)));
    }
    if let Some((_, exponent)) = DECIMAL.iter().find(|(s, _)| *s == suffix) {
        return Ok((10, *exponent));
    }
    let exponent = suffix
        .strip_prefix(['e', 'E'])
        .ok_or(QuantityError::Syntax)?;
    let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    if digits.is_empty() || digits.len() > 3 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(QuantityError::Syntax);
    }
    let exponent: i32 = exponent.parse().map_err(|_| QuantityError::Syntax)?;
    Ok((10, exponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_kubernetes_quantities() {
        for (text, bytes) in [
            ("1", 1),
            ("10Gi", 10 << 30),
            ("1Ti", 1 << 40),
            ("1.5Gi", 3 << 29),
            ("1T", 1_000_000_000_000),
            ("5e9", 5_000_000_000),
            ("1E3", 1000),
            ("1500m", 2),
            ("1m", 1),
            ("0.5", 1),
            (".5Ki", 512),
            ("0", 0),
            ("+2k", 2000),
            ("0Gi", 0),
            ("007Mi", 7 << 20),
        ] {
            assert_eq!(parse_ceil(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn bytes_read_as_a_user_wrote_them() {
        assert_eq!(format_bytes(1 << 40), "1Ti");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(500 << 40), "500Ti");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(0), "0");
        for text in ["1Ti", "1536Mi", "7Ki"] {
            assert_eq!(format_bytes(parse_ceil(text).unwrap()), text);
        }
    }

    #[test]
    fn refuses_what_is_not_a_quantity() {
        for text in [
            "", "ten", "10GB", "10 Gi", "1..2", ".", "Gi", "1e", "1x", "1.2.3Gi",
        ] {
            assert_eq!(parse_ceil(text), Err(QuantityError::Syntax), "{text}");
        }
        assert_eq!(parse_ceil("-1Gi"), Err(QuantityError::Negative));
        assert_eq!(parse_ceil("1e999"), Err(QuantityError::TooLarge));
        assert_eq!(parse_ceil(&"9".repeat(60)), Err(QuantityError::TooLarge));
        assert_eq!(
            parse_ceil("1000000000000000000000Ei"),
            Err(QuantityError::TooLarge)
        );
    }

    #[test]
    fn cpu_in_millicores() {
        for (text, milli) in [
            ("1", 1000),
            ("500m", 500),
            ("1.5", 1500),
            ("0.0001", 1),
            ("1u", 1),
            ("16", 16_000),
            ("4096", 4_096_000),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
            ("2e3", 2_000_000),
        ] {
            assert_eq!(parse_ceil_milli(text), Ok(milli), "{text}");
        }
        assert_eq!(format_milli(16_000), "16");
        assert_eq!(format_milli(1500), "1500m");
    }
}
