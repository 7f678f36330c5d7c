//! The YAML tree: values with the line they came from, read with
//! `serde-saphyr` (duplicate keys are errors, only `true`/`false` are
//! booleans, aliases are capped so an alias bomb is refused at once).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::error::ConfigError;

/// Alias replay cap: a workflow file never needs more; an alias bomb hits it
/// within milliseconds.
const MAX_ALIAS_REPLAYED_EVENTS: usize = 100_000;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Yaml {
    pub(super) value: YamlValue,
    pub(super) line: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum YamlValue {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Yaml>),
    Map(Vec<(Yaml, Yaml)>),
}

impl<'de> Deserialize<'de> for Yaml {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<YamlValue>::deserialize(deserializer)?;
        // `referenced` is where the value is used: for an alias, the alias.
        let line = spanned.referenced.line();
        Ok(Yaml {
            value: spanned.value,
            line: usize::try_from(line).ok().filter(|l| *l > 0),
        })
    }
}

impl<'de> Deserialize<'de> for YamlValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor)
    }
}

struct YamlVisitor;

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = YamlValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<YamlValue, E> {
        Ok(YamlValue::Null)
    }
    fn visit_none<E>(self) -> Result<YamlValue, E> {
        Ok(YamlValue::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<YamlValue, D::Error> {
        YamlValue::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<YamlValue, D::Error> {
        YamlValue::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<YamlValue, E> {
        Ok(YamlValue::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<YamlValue, E> {
        Ok(YamlValue::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<YamlValue, E> {
        Ok(YamlValue::Uint(v))
    }
    fn visit_i128<E>(self, v: i128) -> Result<YamlValue, E> {
        Ok(YamlValue::Float(v as f64))
    }
    fn visit_u128<E>(self, v: u128) -> Result<YamlValue, E> {
        Ok(YamlValue::Float(v as f64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<YamlValue, E> {
        Ok(YamlValue::Float(v))
    }
    fn visit_char<E>(self, v: char) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Yaml>()? {
            items.push(item);
        }
        Ok(YamlValue::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YamlValue, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<Yaml, Yaml>()? {
            entries.push(entry);
        }
        Ok(YamlValue::Map(entries))
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _data: A) -> Result<YamlValue, A::Error> {
        Err(de::Error::custom(
            "tagged enum values are not supported here",
        ))
    }
}

impl Yaml {
    pub(super) fn kind(&self) -> &'static str {
        match &self.value {
            YamlValue::Null => "null",
            YamlValue::Bool(_) => "a boolean",
            YamlValue::Int(_) | YamlValue::Uint(_) | YamlValue::Float(_) => "a number",
            YamlValue::Str(_) => "a string",
            YamlValue::Seq(_) => "a list",
            YamlValue::Map(_) => "a mapping",
        }
    }

    /// `a string ('yes')`: the kind, with a short scalar shown.
    pub(super) fn describe(&self) -> String {
        let shown = match &self.value {
            YamlValue::Str(s) => Some(format!("'{}'", shorten(s, 40))),
            YamlValue::Bool(b) => Some(b.to_string()),
            YamlValue::Int(i) => Some(i.to_string()),
            YamlValue::Uint(u) => Some(u.to_string()),
            YamlValue::Float(x) => Some(x.to_string()),
            _ => None,
        };
        match shown {
            Some(s) => format!("{} ({s})", self.kind()),
            None => self.kind().to_string(),
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match &self.value {
            YamlValue::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn as_map(&self) -> Option<&[(Yaml, Yaml)]> {
        match &self.value {
            YamlValue::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub(super) fn is_null(&self) -> bool {
        matches!(self.value, YamlValue::Null)
    }

    /// A mapping's value for a string key.
    pub(super) fn get(&self, key: &str) -> Option<&Yaml> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// A scalar as text (for mapping keys in schemas).
    pub(super) fn scalar_text(&self) -> Option<String> {
        match &self.value {
            YamlValue::Null => Some("null".to_string()),
            YamlValue::Bool(b) => Some(b.to_string()),
            YamlValue::Int(i) => Some(i.to_string()),
            YamlValue::Uint(u) => Some(u.to_string()),
            YamlValue::Float(x) => Some(x.to_string()),
            YamlValue::Str(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The value as JSON; `Err` names the first non-scalar mapping key.
    pub(super) fn to_json(&self, path: &str) -> Result<Value, ConfigError> {
        Ok(match &self.value {
            YamlValue::Null => Value::Null,
            YamlValue::Bool(b) => Value::Bool(*b),
            YamlValue::Int(i) => Value::from(*i),
            YamlValue::Uint(u) => Value::from(*u),
            YamlValue::Float(x) => serde_json::Number::from_f64(*x)
                .map(Value::Number)
                .unwrap_or_else(|| Value::String(x.to_string())),
            YamlValue::Str(s) => Value::String(s.clone()),
            YamlValue::Seq(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| item.to_json(&format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            YamlValue::Map(entries) => {
                let mut object = Map::new();
                for (k, v) in entries {
                    let Some(key) = k.scalar_text() else {
                        return Err(ConfigError::new(
                            path,
                            k.line,
                            format!("mapping keys must be scalars, got {}", k.kind()),
                        ));
                    };
                    let value = v.to_json(&child(path, &key))?;
                    object.insert(key, value);
                }
                Value::Object(object)
            }
        })
    }
}

pub(super) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

/// `path.key`, or `path["odd key"]` when the key is not a plain word.
pub(super) fn child(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::String(key.to_string())),
    }
}

/// A YAML error: line, column, message.
type YamlError = (Option<usize>, Option<usize>, String);

/// Parses on a thread of its own with a roomy stack: deserialising nested
/// values recurses (deeply, in a debug build), and the parser's depth budget
/// (64 levels) must be what stops a deep document — not a stack overflow on a
/// small runtime thread.
pub(super) fn parse_yaml(text: &str) -> Result<Yaml, YamlError> {
    const PARSE_STACK: usize = 32 * 1024 * 1024;
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("toolpool-yaml".to_string())
            .stack_size(PARSE_STACK)
            .spawn_scoped(scope, || parse_yaml_here(text));
        match parser {
            Ok(handle) => handle.join().unwrap_or_else(|_| {
                Err((
                    None,
                    None,
                    "the YAML parser failed unexpectedly".to_string(),
                ))
            }),
            // No thread to be had: parse here (the budget still applies).
            Err(_) => parse_yaml_here(text),
        }
    })
}

fn parse_yaml_here(text: &str) -> Result<Yaml, YamlError> {
    use serde_saphyr::budget::BudgetBreach;
    use serde_saphyr::options::{DuplicateKeyPolicy, NonFiniteFloatPolicy};
    use serde_saphyr::{Error, MessageFormatter, UserMessageFormatter};
    let options = serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: DuplicateKeyPolicy::Error,
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_ALIAS_REPLAYED_EVENTS,
        },
        // `.inf` in a schema stays the string ".inf" instead of failing the file.
        non_finite_float_policy: NonFiniteFloatPolicy::AsString,
        with_snippet: false,
    };
    serde_saphyr::from_str_with_options::<Yaml>(text, options).map_err(|error| {
        let error = error.without_snippet();
        let location = error.location();
        let line = location
            .map(|l| l.line())
            .and_then(|l| usize::try_from(l).ok())
            .filter(|l| *l > 0);
        let column = location
            .map(|l| l.column())
            .and_then(|c| usize::try_from(c).ok())
            .filter(|c| *c > 0);
        // An error inside an aliased value comes wrapped in `AliasError`
        // (once per alias of the chain) around the original error.
        fn is_alias_bomb(error: &Error) -> bool {
            match error {
                Error::AliasReplayLimitExceeded { .. }
                | Error::AliasExpansionLimitExceeded { .. }
                | Error::AliasReplayStackDepthExceeded { .. }
                | Error::AliasReplayCounterOverflow { .. } => true,
                Error::AliasError { error, .. } => is_alias_bomb(error),
                _ => false,
            }
        }
        let alias_bomb = is_alias_bomb(error);
        let message = if alias_bomb {
            format!(
                "its aliases expand to too much data (over {MAX_ALIAS_REPLAYED_EVENTS} \
                 replayed YAML events); refusing it as a possible alias bomb"
            )
        } else if let Error::Budget {
            breach: BudgetBreach::Depth { .. },
            ..
        } = error
        {
            "nested too deeply (more than 64 levels of lists and mappings)".to_string()
        } else {
            UserMessageFormatter.format_message(error).into_owned()
        };
        (line, column, message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_keys_are_quoted_in_paths() {
        assert_eq!(child("a", "b"), "a.b");
        assert_eq!(child("a", "b c"), "a[\"b c\"]");
        assert_eq!(child("", "b"), "b");
    }
}
