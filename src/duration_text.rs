//! Durations as operators write them on the command line and read them in
//! messages: seconds, fractions allowed.

use std::time::Duration;

/// Seconds without trailing zeros: `1`, `0.2`, `2.5`.
pub fn format_secs(duration: Duration) -> String {
    let text = format!("{:.3}", duration.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A positive number of seconds (clap's value parser for `SECS` options).
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 || secs > 1e9 {
        return Err(format!("'{text}' must be a positive number of seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_printed_without_trailing_zeros() {
        assert_eq!(format_secs(Duration::from_secs(1)), "1");
        assert_eq!(format_secs(Duration::from_millis(200)), "0.2");
        assert_eq!(format_secs(Duration::from_millis(2500)), "2.5");
    }

    #[test]
    fn seconds_must_be_a_positive_finite_number() {
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "inf", "NaN", "1e10", "soon"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
