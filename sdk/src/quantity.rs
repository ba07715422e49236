//! The Kubernetes quantity grammar ("500m", "1.5Gi", "1e3"), checked here because an API server
//! without our CRD schema lets any string through and the Pod or PVC would then be refused.

const BINARY_SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const DECIMAL_SUFFIXES: [&str; 8] = ["n", "u", "m", "", "k", "M", "G", "T"];
const MORE_DECIMAL_SUFFIXES: [&str; 2] = ["P", "E"];

/// True for a positive Kubernetes quantity.
pub fn is_positive_quantity(text: &str) -> bool {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let valid_number = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit() && c != '0');
    valid_number && valid_suffix(suffix)
}

fn valid_suffix(suffix: &str) -> bool {
    if BINARY_SUFFIXES.contains(&suffix)
        || DECIMAL_SUFFIXES.contains(&suffix)
        || MORE_DECIMAL_SUFFIXES.contains(&suffix)
    {
        return true;
    }
    // Decimal exponent: e or E, an optional sign, digits.
    let Some(exponent) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::is_positive_quantity;

    #[test]
    fn accepts_kubernetes_quantities() {
        for q in [
            "1", "10Gi", "500m", "1.5Gi", "0.5", "2e3", "1E-2", "100M", "3Ei", ".5Gi",
        ] {
            assert!(is_positive_quantity(q), "{q} should parse");
        }
    }

    #[test]
    fn rejects_what_the_api_server_would() {
        for q in [
            "", "ten", "10GB", "10 Gi", "-1Gi", "0", "0Gi", "1..2", ".", "Gi", "1e", "1x",
        ] {
            assert!(!is_positive_quantity(q), "{q} should not parse");
        }
    }
}
