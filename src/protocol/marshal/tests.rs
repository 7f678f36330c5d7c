//! The decoder against what the shim's walk gives, with real python3, and on hostile blobs.

use super::*;
use serde_json::json;

/// Blobs `marshal.dumps` writes for every kind of result, each with what
/// the shim's walk (`to_jsonable`) gives or raises for the same value,
/// from the real interpreter.
const SAMPLES: &str = r#"
import json, marshal, math, random, sys
from toolpool_shim.results import to_jsonable

def code():
    def inner(a, b=2):
        return a + b
    return inner.__code__

random.seed(7)
floats = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, 1e15, 1e16, 9999999999999998.0, 1e-4, 1e-5,
          123456789012345678.0, -2.5e-300, 2.0**60, 0.5, 100.0, 1e22, 1e21]
floats += [random.uniform(-1e6, 1e6) for _ in range(300)]
floats += [random.random() * 10.0 ** random.randint(-30, 30) for _ in range(300)]
loop = [1]
loop.append(loop)
deep = 1
for _ in range(101):
    deep = [deep]
shared = ["s"]
samples = [
    None, True, False, 0, -1, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 2**64,
    -(2**63) - 1, 2**200, -(2**200), 10**4299, 1.5, -0.0, float("nan"), float("inf"), -float("inf"),
    "", "ascii", "ünï \u2603 \U0001f600", "x" * 300, "é" * 300, b"", b"\x00\xffhi", bytearray(b"ab"),
    memoryview(b"mv"), (), (1, "two", 3.0), [1, [2, [3]]], {3, 1, 2}, frozenset({5}), set(), frozenset(),
    1 + 2j, 1j, -1j, complex(-0.0, 1), complex(float("nan"), float("inf")), complex(1, float("nan")),
    complex(2.5, -0.0), 0j, complex(-0.0, -0.0), complex(1e16, 1.5e-7), ..., StopIteration,
    {"a": 1, "b": [None, {"c": ()}]}, [shared, shared, shared], [{"k": i} for i in range(20)],
    {7: "a", -2: "b", 2**70: "w", True: "t", False: "f", None: "n", b"k'ey": 1, b"\x00\"'": 2},
    {("t", 1): 1, (1.5, None, b"x", (True,), "it's", 'q"'): 2, (): 3, ("one",): 4, (2**70, -1e16): 5},
    {frozenset({1}): 1, frozenset(): 2, 1 + 2j: 3, ...: 4, StopIteration: 5, (frozenset({2}),): 6},
    {("\t\n\r\\\x00\x7f", "é\u00a0\u2028\ufeff"): 1, ("ab",): 2},
    {f: i for i, f in enumerate(floats)}, {(f,): 0 for f in floats[:50]},
    {1: "one", "1": "string one"}, [[[[[[[[[[1]]]]]]]]]],
    code(), {"f": code()},
    loop, deep, {"k": deep}, 10**4300, {10**4300: 1},
]
def clean(value):  # NaN and the infinities: null, as serde_json holds them
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [clean(item) for item in value]
    if isinstance(value, dict):
        return {key: clean(item) for key, item in value.items()}
    return value

for value in samples:
    blob = marshal.dumps(value, 4).hex()
    try:
        print(json.dumps({"blob": blob, "walk": clean(to_jsonable(value))}))
    except ValueError as exc:
        print(json.dumps({"blob": blob, "error": str(exc)}))
print(json.dumps({"blob": marshal.dumps("\ud800", 4).hex(), "error": "surrogate"}))
"#;

fn python_samples() -> Vec<Value> {
    let output = std::process::Command::new("python3")
        .args(["-c", SAMPLES])
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/python_shim"),
        )
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn every_kind_of_value_arrives_as_the_walk_converts_it() {
    let samples = python_samples();
    assert!(samples.len() > 60);
    for sample in samples {
        let blob = unhex(sample["blob"].as_str().unwrap());
        let decoded = from_marshal(&blob);
        match (&sample.get("walk"), &sample.get("error")) {
            (Some(walk), _) => {
                let value = decoded.unwrap_or_else(|e| panic!("{sample}: {e}"));
                if let Some(text) = walk.as_str() {
                    if text.starts_with("<code object") {
                        // str() of a code object holds its address, which the blob does not.
                        let (name, rest) = text.split_once(" at 0x").unwrap();
                        let rest = rest.split_once(',').unwrap().1;
                        assert_eq!(value, json!(format!("{name},{rest}")));
                        continue;
                    }
                }
                if walk
                    .get("f")
                    .is_some_and(|f| f.to_string().contains("code object"))
                {
                    continue;
                }
                if let Some(difference) = first_difference(&value, walk) {
                    panic!(
                        "{difference} (blob {})",
                        &sample["blob"].to_string()[..80.min(sample["blob"].to_string().len())]
                    );
                }
            }
            (None, Some(error)) if *error == "surrogate" => {
                let error = decoded.unwrap_err();
                assert_eq!(error.python_type(), "UnicodeEncodeError");
                assert_eq!(error.to_string(), "the result cannot be encoded: 'utf-8' codec can't encode character '\\ud800' in position 0: surrogates not allowed");
            }
            (None, Some(error)) => {
                assert_eq!(
                    decoded.unwrap_err().to_string(),
                    error.as_str().unwrap(),
                    "{sample}"
                );
            }
            _ => unreachable!(),
        }
    }
}

/// Where `got` and `want` differ first (a short message for big values).
fn first_difference(got: &Value, want: &Value) -> Option<String> {
    match (got, want) {
        (Value::Object(a), Value::Object(b)) => {
            for ((ka, va), (kb, vb)) in a.iter().zip(b.iter()) {
                if ka != kb {
                    return Some(format!("key {ka:?} where the walk has {kb:?}"));
                }
                if let Some(inner) = first_difference(va, vb) {
                    return Some(format!("{ka:?}: {inner}"));
                }
            }
            (a.len() != b.len()).then(|| format!("{} keys, the walk {}", a.len(), b.len()))
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (va, vb)) in a.iter().zip(b.iter()).enumerate() {
                if let Some(inner) = first_difference(va, vb) {
                    return Some(format!("[{i}]: {inner}"));
                }
            }
            (a.len() != b.len()).then(|| format!("{} items, the walk {}", a.len(), b.len()))
        }
        _ => (got != want).then(|| format!("{got} where the walk has {want}")),
    }
}

#[test]
fn sets_arrive_in_marshals_order() {
    // marshal sorts a set's elements by their bytes; the walk has hash order.
    let blob = [
        b"<\x03\x00\x00\x00".as_slice(),
        b"\xda\x01b\xda\x01a\xda\x01c",
    ]
    .concat();
    assert_eq!(from_marshal(&blob).unwrap(), json!(["b", "a", "c"]));
}

fn error(blob: &[u8]) -> String {
    from_marshal(blob).unwrap_err().to_string()
}

#[test]
fn truncated_unknown_and_trailing_bytes_are_errors() {
    for (blob, says) in [
        (
            b"".as_slice(),
            "it ends early (1 bytes needed, 0 left) at byte 0",
        ),
        (b"i\x01\x00", "(4 bytes needed, 2 left) at byte 1"),
        (
            b"[\x02\x00\x00\x00N",
            "a length of 2, more than the bytes left hold",
        ),
        (b"[\x01\x00\x00\x00i\x01", "4 bytes needed"),
        (b"{z\x01a", "1 bytes needed, 0 left"),
        (b"?", "unknown type code 0x3f ('?') at byte 0"),
        (
            b"[\x01\x00\x00\x000",
            "unknown type code 0x30 ('0') at byte 5",
        ),
        (b"NN", "trailing bytes after the result at byte 1"),
        (
            b"l\x01\x00\x00\x00\x00\x80",
            "an integer digit out of range",
        ),
        (
            b"l\x02\x00\x00\x00\x01\x00\x00\x00",
            "an integer with a leading zero digit",
        ),
        (b"u\x02\x00\x00\x00\xff\xfe", "text that is not UTF-8"),
        (b"[\xff\xff\xff\xff", "a negative length"),
    ] {
        let got = error(blob);
        assert!(got.contains(says), "{blob:?}: {got}");
    }
}

#[test]
fn a_huge_declared_length_allocates_nothing() {
    for blob in [
        b"[\xff\xff\xff\x7f".as_slice(),
        b"s\xff\xff\xff\x7f",
        b"u\xff\xff\xff\x7f",
        b"l\xff\xff\xff\x7f",
        b"(\xff\xff\xff\x7fN",
    ] {
        assert!(
            error(blob).contains("more than the bytes left hold"),
            "{blob:?}"
        );
    }
}

#[test]
fn nesting_is_held_to_the_result_depth() {
    let nested = |levels: usize| [b"[\x01\x00\x00\x00".repeat(levels), b"N".to_vec()].concat();
    assert!(from_marshal(&nested(MAX_RESULT_DEPTH)).is_ok());
    assert_eq!(
        from_marshal(&nested(MAX_RESULT_DEPTH + 1)),
        Err(MarshalError::TooDeep)
    );
    // Far deeper than the stack would hold if the decoder recursed unchecked.
    assert_eq!(from_marshal(&nested(1_000_000)), Err(MarshalError::TooDeep));
    // Dict keys that are tuples count too.
    let keys = [b"{".to_vec(), b")\x01".repeat(200), b"N".to_vec()].concat();
    assert_eq!(from_marshal(&keys), Err(MarshalError::TooDeep));
}

#[test]
fn references_to_open_containers_missing_objects_and_blow_ups_are_errors() {
    // A list (flagged, object 0) holding a reference to itself.
    assert_eq!(
        from_marshal(b"\xdb\x01\x00\x00\x00r\x00\x00\x00\x00"),
        Err(MarshalError::ContainsItself("list"))
    );
    assert_eq!(
        from_marshal(b"\xfbr\x00\x00\x00\x00N0"),
        Err(MarshalError::ContainsItself("dict"))
    );
    assert!(error(b"[\x01\x00\x00\x00r\x05\x00\x00\x00").contains("object 5, which does not exist"));
    assert!(error(b"r\xff\xff\xff\xff").contains("does not exist"));
    // Each list holds the one inside it twice, the second time by
    // reference: 2**40 elements from 400 bytes.
    let mut blob = b"\xdb\x02\x00\x00\x00".repeat(40);
    blob.extend_from_slice(b"\xdb\x00\x00\x00\x00");
    for index in (0..40u32).rev() {
        blob.push(b'r');
        blob.extend_from_slice(&(index + 1).to_le_bytes());
    }
    assert!(matches!(
        from_marshal(&blob),
        Err(MarshalError::TooLarge | MarshalError::TooManyValues)
    ));
    // A list of more values than a result may hold, each one byte (`None`).
    let count = crate::protocol::MAX_VALUES as u32;
    let mut nones = vec![b'['];
    nones.extend_from_slice(&count.to_le_bytes());
    nones.extend(std::iter::repeat_n(b'N', count as usize));
    assert_eq!(from_marshal(&nones), Err(MarshalError::TooManyValues));
    nones[1..5].copy_from_slice(&(count - 1).to_le_bytes());
    nones.pop();
    assert!(from_marshal(&nones).is_ok());
}

#[test]
fn the_writer_gives_what_marshal_dumps_gives_for_json_loads() {
    let value = json!({
        "rows": [
            {"id": 1, "name": "item-1", "score": 0.5, "tags": ["a", "b"]},
            {"id": 2, "name": "id", "score": 1.5, "tags": ["b", "a", "x".repeat(40)]},
            {"x".repeat(40): "x".repeat(40), "tags": "name"},
        ],
        "ints": [0, -1, 2147483647, -2147483648, 2147483648u64, i64::MIN, i64::MAX, u64::MAX],
        "floats": [1.5, -0.0, 1e300],
        "text": ["", "ünï \u{2603}", "x".repeat(300), "é".repeat(300)],
        "flags": [true, false, null],
        "ünï": {},
    });
    let blob = marshal_writer_hex(&value);
    let script = "import json, marshal, sys\n\
            blob, text = sys.argv[1], sys.argv[2]\n\
            loaded = marshal.loads(bytes.fromhex(blob))\n\
            assert loaded == json.loads(text), (loaded, json.loads(text))\n\
            assert [type(x) for x in loaded['ints']] == [int] * 8\n\
            first, second = (list(row)[0] for row in loaded['rows'][:2])\n\
            assert first is second, 'keys are shared'\n\
            print('same')";
    let output = std::process::Command::new("python3")
        .args(["-c", script, &blob, &value.to_string()])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "same",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // What the writer gives, the decoder reads back.
    let bytes = crate::protocol::marshal_writer::to_marshal(&value).unwrap();
    assert_eq!(from_marshal(&bytes).unwrap(), value);
}

fn marshal_writer_hex(value: &Value) -> String {
    crate::protocol::marshal_writer::to_marshal(value)
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
