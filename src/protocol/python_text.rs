//! Python's own spellings of values, for the result decoder: `repr(float)`
//! (dict keys, as `json.dumps` writes them), `str(complex)`, `repr(bytes)`,
//! `repr(str)` and an integer's decimal digits — what the shim's walk
//! (`results.to_jsonable`) gets from `str()` and `json.dumps`.

use std::fmt::Write as _;

/// `repr(float)`: the shortest digits that round-trip, positional for
/// decimal exponents -4 to 15 (`0.0001`, `2.0`), else `1.5e+16`, `1e-07`;
/// NaN and the infinities as `nan`, `inf`, `-inf`.
pub(super) fn float_repr(v: f64) -> String {
    let mut text = float_digits(v);
    if v.is_finite() && !text.contains(['.', 'e']) {
        text.push_str(".0");
    }
    text
}

/// A float as `repr` writes it without the `.0` that marks an integral
/// value (`format(v, "r")`, which `complex` uses for its parts: `1`, `-0`).
fn float_digits(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let scientific = shortest_scientific(v);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if v == 0.0 {
        return format!("{v}"); // "0", "-0"
    }
    if (-4..16).contains(&exponent) {
        return positional(mantissa, exponent);
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
}

/// `v` in scientific notation with Python's digits: the fewest that read
/// back as `v` and, of those, the ones nearest to it. Rust's `{:e}` gives
/// the fewest, but not always the nearest (`154446623768692.13` where
/// Python writes `.12`); formatting to that many digits rounds correctly.
fn shortest_scientific(v: f64) -> String {
    let shortest = format!("{v:e}"); // "1.5e16", "-2e-7"
    let mantissa = shortest
        .split_once('e')
        .map_or(shortest.as_str(), |(m, _)| m);
    let digits = mantissa.bytes().filter(u8::is_ascii_digit).count();
    let nearest = format!("{v:.*e}", digits.saturating_sub(1));
    if nearest.parse::<f64>().ok() == Some(v) {
        nearest
    } else {
        shortest
    }
}

/// Digits `mantissa` ("-1.2345") times 10**`exponent` written out: "-12.345",
/// "0.00012345"; an integral value without ".0" ("12345").
fn positional(mantissa: &str, exponent: i32) -> String {
    let (sign, unsigned) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = unsigned.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let point = exponent + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = point as usize;
    if digits.len() <= point {
        format!("{sign}{digits}{}", "0".repeat(point - digits.len()))
    } else {
        format!("{sign}{}.{}", &digits[..point], &digits[point..])
    }
}

/// `str(complex)`: `(1+2j)`; a real part of +0 is left out (`2j`, `-1j`),
/// NaN parts are `nan` (`(1+nanj)`), integral parts have no `.0`.
pub(super) fn complex_str(real: f64, imag: f64) -> String {
    if real == 0.0 && real.is_sign_positive() {
        return format!("{}j", float_digits(imag));
    }
    let imag_text = float_digits(imag);
    let sign = if imag.is_nan() || imag.is_sign_positive() {
        "+"
    } else {
        ""
    };
    format!("({}{sign}{imag_text}j)", float_digits(real))
}

/// `repr(bytes)`: `b'...'`, quoted with `"` only when the bytes hold a `'`
/// and no `"`, printable ASCII as is, the rest escaped.
pub(super) fn bytes_repr(bytes: &[u8]) -> String {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    let mut text = String::with_capacity(bytes.len() + 3);
    text.push('b');
    text.push(quote as char);
    for &byte in bytes {
        match byte {
            b'\\' => text.push_str("\\\\"),
            b'\t' => text.push_str("\\t"),
            b'\n' => text.push_str("\\n"),
            b'\r' => text.push_str("\\r"),
            b if b == quote => {
                text.push('\\');
                text.push(quote as char);
            }
            0x20..=0x7e => text.push(byte as char),
            _ => {
                let _ = write!(text, "\\x{byte:02x}");
            }
        }
    }
    text.push(quote as char);
    text
}

/// `repr(str)` of text given as code points (a lone surrogate is one of
/// them): quoted with `"` only when it holds a `'` and no `"`; ASCII
/// exactly as Python escapes it. Python keeps the non-ASCII characters
/// Unicode calls printable and escapes the rest, which needs Unicode's
/// tables; here the C1 controls, U+00A0, U+00AD, the line and paragraph
/// separators, the zero-width and bidirectional format characters, the
/// byte-order mark and surrogates are escaped as Python escapes them, and
/// every other character is kept.
pub(super) fn str_repr(text: &[u32], out: &mut String) {
    let has = |c: char| text.contains(&(c as u32));
    let quote = if has('\'') && !has('"') { '"' } else { '\'' };
    out.push(quote);
    for &point in text {
        match char::from_u32(point) {
            Some('\\') => out.push_str("\\\\"),
            Some('\t') => out.push_str("\\t"),
            Some('\n') => out.push_str("\\n"),
            Some('\r') => out.push_str("\\r"),
            Some(c) if c == quote => {
                out.push('\\');
                out.push(quote);
            }
            Some(c @ ' '..='~') => out.push(c),
            Some(c) if !escaped_by_python(point) && !c.is_ascii() => out.push(c),
            _ if point < 0x100 => {
                let _ = write!(out, "\\x{point:02x}");
            }
            _ if point < 0x10000 => {
                let _ = write!(out, "\\u{point:04x}");
            }
            _ => {
                let _ = write!(out, "\\U{point:08x}");
            }
        }
    }
    out.push(quote);
}

/// The non-ASCII characters this module knows Python's `repr` escapes.
fn escaped_by_python(point: u32) -> bool {
    matches!(point,
        0x80..=0xa0 | 0xad | 0x2028 | 0x2029 | 0x200b..=0x200f | 0x202a..=0x202e
        | 0x2060..=0x2064 | 0xfeff | 0xd800..=0xdfff)
}

/// The largest number of decimal digits Python converts an integer to
/// (`sys.get_int_max_str_digits()`'s default).
pub(super) const INT_MAX_STR_DIGITS: usize = 4300;

/// The decimal digits of the magnitude held in `digits` (base 2**15, least
/// significant first, as marshal writes them); `None` past
/// [`INT_MAX_STR_DIGITS`] digits, where Python's `str()` raises.
pub(super) fn decimal_digits(digits: &[u16]) -> Option<String> {
    // Base 10**9 limbs, least significant first: multiply by 2**15 and add
    // each digit from the most significant one down.
    const LIMB: u64 = 1_000_000_000;
    // Each 15-bit digit adds at most five decimal digits: stop early on a
    // number no string may hold, before the quadratic work.
    if digits.len().saturating_sub(1) * 15 * 3 / 10 > INT_MAX_STR_DIGITS + 9 {
        return None;
    }
    let mut limbs: Vec<u64> = Vec::with_capacity(digits.len() / 2 + 1);
    for &digit in digits.iter().rev() {
        let mut carry = u64::from(digit);
        for limb in limbs.iter_mut() {
            let wide = (*limb << 15) + carry;
            *limb = wide % LIMB;
            carry = wide / LIMB;
        }
        while carry > 0 {
            limbs.push(carry % LIMB);
            carry /= LIMB;
        }
    }
    let mut text = match limbs.last() {
        Some(top) => top.to_string(),
        None => return Some("0".into()),
    };
    for limb in limbs.iter().rev().skip(1) {
        let _ = write!(text, "{limb:09}");
    }
    (text.len() <= INT_MAX_STR_DIGITS).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_complex_bytes_and_text_are_spelled_as_python_spells_them() {
        for (value, spelled) in [
            (1.5, "1.5"),
            (2.0, "2.0"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(float_repr(value), spelled);
        }
        assert_eq!(complex_str(1.0, 2.0), "(1+2j)");
        assert_eq!(complex_str(-0.0, -0.0), "(-0-0j)");
        assert_eq!(complex_str(0.0, f64::NAN), "nanj");
        assert_eq!(bytes_repr(b"a'b\x00"), "b\"a'b\\x00\"");
        let mut text = String::new();
        str_repr(&[0x27, 0x22, 0x7f, 0xe9, 0xd800], &mut text);
        assert_eq!(text, "'\\'\"\\x7fé\\ud800'");
        assert_eq!(
            decimal_digits(&[0, 0, 0, 0, 0, 1]).unwrap(),
            "37778931862957161709568"
        ); // 2**75
        assert_eq!(decimal_digits(&[]).unwrap(), "0");
        assert!(decimal_digits(&vec![0x7fff; 954]).is_none());
    }
}
