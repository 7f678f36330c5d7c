//! A call's JSON arguments as one `marshal` blob (format 4, `args_marshal`),
//! which the shim turns into Python objects with `marshal.loads`, in C.
//!
//! Only what JSON holds is written, with no references: `N`, `T`, `F`,
//! `i` (32-bit integers) or `l` (wider ones, base-2**15 digits), `g`
//! (binary float), `z`/`a` (ASCII text) or `u` (UTF-8 text), `[` and
//! `{` ... `0`. The blob is built by the supervisor, so the shim trusts it.

use serde_json::Value;

/// Why arguments cannot be written: a text or list longer than marshal's
/// 32-bit lengths (far past any frame).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    #[error("an argument holds {0} items or bytes, more than marshal can carry")]
    TooLong(usize),
}

/// `value` as `marshal.dumps(value, 4)` would write the Python object
/// `json.loads` makes of it (without marshal's reference flags).
pub fn to_marshal(value: &Value) -> Result<Vec<u8>, WriteError> {
    let mut out = Vec::with_capacity(64);
    write(value, &mut out)?;
    Ok(out)
}

fn write(value: &Value, out: &mut Vec<u8>) -> Result<(), WriteError> {
    match value {
        Value::Null => out.push(b'N'),
        Value::Bool(true) => out.push(b'T'),
        Value::Bool(false) => out.push(b'F'),
        Value::Number(number) => {
            if let Some(small) = number.as_i64().and_then(|n| i32::try_from(n).ok()) {
                out.push(b'i');
                out.extend_from_slice(&small.to_le_bytes());
            } else if let Some(n) = number.as_i64() {
                write_long(n < 0, u128::from(n.unsigned_abs()), out);
            } else if let Some(n) = number.as_u64() {
                write_long(false, u128::from(n), out);
            } else {
                out.push(b'g');
                out.extend_from_slice(&number.as_f64().unwrap_or(f64::NAN).to_le_bytes());
            }
        }
        Value::String(text) => write_text(text, out)?,
        Value::Array(items) => {
            out.push(b'[');
            write_length(items.len(), out)?;
            for item in items {
                write(item, out)?;
            }
        }
        Value::Object(map) => {
            out.push(b'{');
            for (key, item) in map {
                write_text(key, out)?;
                write(item, out)?;
            }
            out.push(b'0');
        }
    }
    Ok(())
}

fn write_length(n: usize, out: &mut Vec<u8>) -> Result<(), WriteError> {
    let n32 = i32::try_from(n).map_err(|_| WriteError::TooLong(n))?;
    out.extend_from_slice(&n32.to_le_bytes());
    Ok(())
}

fn write_text(text: &str, out: &mut Vec<u8>) -> Result<(), WriteError> {
    let bytes = text.as_bytes();
    match (text.is_ascii(), u8::try_from(bytes.len())) {
        (true, Ok(short)) => {
            out.push(b'z');
            out.push(short);
        }
        (true, Err(_)) => {
            out.push(b'a');
            write_length(bytes.len(), out)?;
        }
        (false, _) => {
            out.push(b'u');
            write_length(bytes.len(), out)?;
        }
    }
    out.extend_from_slice(bytes);
    Ok(())
}

/// `l`: the digit count (negative for a negative number), then the
/// magnitude's base-2**15 digits, least significant first.
fn write_long(negative: bool, mut magnitude: u128, out: &mut Vec<u8>) {
    let mut digits = Vec::with_capacity(5);
    while magnitude > 0 {
        digits.push((magnitude & 0x7fff) as u16);
        magnitude >>= 15;
    }
    let count = digits.len() as i32; // at most five digits for 64 bits
    out.push(b'l');
    out.extend_from_slice(&(if negative { -count } else { count }).to_le_bytes());
    for digit in digits {
        out.extend_from_slice(&digit.to_le_bytes());
    }
}
