//! How many values a JSON text holds, counted without parsing it. A parsed
//! value costs the server far more than its text (a `0,` is two bytes of
//! text and a whole `serde_json::Value` parsed), so a request's values are
//! counted, and refused past [`MAX_VALUES`], before anything parses it.

/// The most JSON values one request's arguments, or one result, may hold.
pub(crate) const MAX_VALUES: usize = 2_000_000;

/// An upper bound on the values in `text`: one per container, plus one per
/// separator (`,` or `:`) outside strings, plus one. Exact for arrays of
/// scalars; an object's keys count as values too (each is a string parsed).
pub(crate) fn count_values(text: &[u8]) -> usize {
    let mut count = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' | b',' | b':' => count += 1,
            _ => {}
        }
    }
    count
}

#[cfg(feature = "mcp")]
/// Why a message holding about `values` JSON values is refused.
pub(crate) fn too_many(values: usize) -> String {
    format!(
        "the message holds about {values} JSON values; at most {MAX_VALUES} are taken (each costs the server memory once parsed): send fewer, or a file"
    )
}

#[cfg(test)]
mod tests {
    use super::count_values;

    #[test]
    fn values_are_counted_outside_strings() {
        assert_eq!(count_values(b"[0,0,0]"), 4);
        assert_eq!(count_values(br#"{"a": 1, "b": [1, 2]}"#), 7);
        // Separators and quotes inside strings are text.
        assert_eq!(count_values(br#"["a,b:c[{", "\"[,"]"#), 3);
        let zeros = format!("[{}]", vec!["0"; 1000].join(","));
        assert_eq!(count_values(zeros.as_bytes()), 1001);
    }
}
