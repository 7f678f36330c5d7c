//! The environment a worker gets: minimal by default, plus what the
//! operator passes (`--pass-env NAME`, glob patterns) or sets
//! (`--env-file FILE`, dotenv lines).
//!
//! Real tool folders read keys and settings from the environment
//! (`SERPER_DEV_API_KEY`, `JINA_API_KEY`, `TEMP_CODE_DIR`, ...); a worker
//! never sees toolpool's whole environment unless told to.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Variables every worker gets (when set here), besides `LC_*`.
const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TZ"];

/// A problem in an `--env-file`, named by file and line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvFileError {
    /// The file cannot be read (or is not UTF-8).
    #[error("cannot read the env file {path}: {source}")]
    Read {
        /// The env file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A line is not `NAME=value` as [`read_env_file`] reads them.
    #[error("{path}:{line}: {problem}")]
    Line {
        /// The env file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
}

/// `*` (any run of characters) and `?` (one character) in `pattern`.
fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Classic backtracking on the last `*`: linear for these short names.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether a worker gets the inherited variable `name`: the base set, `LC_*`
/// and what matches a `--pass-env` pattern. `PYTHON*` variables only when a
/// pattern that itself starts with `PYTHON` matches (so `--pass-env '*'`
/// does not hand workers `PYTHONPATH`).
fn is_passed(name: &str, patterns: &[String]) -> bool {
    let matched = |python_only: bool| {
        patterns
            .iter()
            .filter(|p| !python_only || p.starts_with("PYTHON"))
            .any(|p| glob_matches(p, name))
    };
    if name.starts_with("PYTHON") {
        return matched(true);
    }
    BASE_ENV.contains(&name) || name.starts_with("LC_") || matched(false)
}

/// A worker's environment: the inherited variables it may have, then the
/// `set` ones (from env files), which win.
pub(crate) fn worker_env(
    patterns: &[String],
    set: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            !set.iter().any(|(n, _)| *n == name) && is_passed(&name, patterns)
        })
        .collect();
    env.extend(set.iter().map(|(n, v)| (n.into(), v.into())));
    env
}

/// Reads dotenv lines: `NAME=value`, optionally `export NAME=value`; blank
/// lines and `#` comments skipped; a value in single quotes is taken as
/// written, one in double quotes with `\n`, `\t`, `\"` and `\\` escapes; an
/// unquoted value is trimmed and ends at ` #`. Every bad line is an error.
pub fn read_env_file(path: &Path) -> Result<Vec<(String, String)>, EnvFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| EnvFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut vars = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let problem = |problem: String| EnvFileError::Line {
            path: path.to_path_buf(),
            line: i + 1,
            problem,
        };
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let Some((name, value)) = line.split_once('=') else {
            return Err(problem(format!("expected NAME=value, got {line:?}")));
        };
        let name = name.trim();
        let valid_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(problem(format!(
                "{name:?} is not a variable name (letters, digits and '_', not starting with a digit)"
            )));
        }
        let value = unquote(value.trim()).map_err(problem)?;
        if value.contains('\0') {
            return Err(problem(format!(
                "the value of {name} contains a NUL character"
            )));
        }
        vars.retain(|(n, _): &(String, String)| n != name);
        vars.push((name.to_string(), value));
    }
    Ok(vars)
}

fn unquote(value: &str) -> Result<String, String> {
    if let Some(rest) = value.strip_prefix('\'') {
        let end = rest
            .find('\'')
            .ok_or("a single-quoted value is not closed")?;
        return trailing(&rest[end + 1..]).map(|()| rest[..end].to_string());
    }
    if let Some(rest) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => return trailing(&rest[at + 1..]).map(|()| out),
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(e @ ('"' | '\\' | '$')) => out.push(e),
                    Some(e) => {
                        out.push('\\');
                        out.push(e);
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        return Err("a double-quoted value is not closed".into());
    }
    let value = value.find(" #").map_or(value, |at| &value[..at]);
    Ok(value.trim_end().to_string())
}

/// After a closing quote only a comment may follow.
fn trailing(rest: &str) -> Result<(), String> {
    let rest = rest.trim();
    if rest.is_empty() || rest.starts_with('#') {
        Ok(())
    } else {
        Err(format!("unexpected {rest:?} after the closing quote"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_matches("SERPER_*", "SERPER_DEV_API_KEY"));
        assert!(glob_matches("*_API_KEY", "JINA_API_KEY"));
        assert!(glob_matches("TEMP_?ODE_DIR", "TEMP_CODE_DIR"));
        assert!(glob_matches("A*B*C", "AxxBxxC"));
        assert!(!glob_matches("SERPER_*", "XSERPER_KEY"));
        assert!(!glob_matches("JINA", "JINA_API_KEY"));
        assert!(!glob_matches("A*B", "AxxBx"));
    }

    #[test]
    fn python_variables_need_a_pattern_of_their_own() {
        let all = vec!["*".to_string()];
        assert!(is_passed("SECRET", &all));
        assert!(!is_passed("PYTHONPATH", &all));
        assert!(is_passed("PYTHONPATH", &["PYTHON*".to_string()]));
        assert!(is_passed("PATH", &[]));
        assert!(is_passed("LC_ALL", &[]));
        assert!(!is_passed("SECRET", &[]));
    }

    #[test]
    fn workers_get_the_minimal_set_the_passed_and_the_set_variables() {
        std::env::set_var("TOOLPOOL_ENV_TEST_SECRET", "x");
        std::env::set_var("LC_TOOLPOOL_ENV_TEST", "y");
        std::env::set_var("TOOLPOOL_ENV_TEST_KEY", "inherited");
        let names = |env: &[(OsString, OsString)]| -> Vec<String> {
            env.iter()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect()
        };
        let env = worker_env(&[], &[]);
        assert!(!names(&env).contains(&"TOOLPOOL_ENV_TEST_SECRET".to_string()));
        assert!(names(&env).contains(&"LC_TOOLPOOL_ENV_TEST".to_string()));
        let set = vec![("TOOLPOOL_ENV_TEST_KEY".to_string(), "from file".to_string())];
        let env = worker_env(&["TOOLPOOL_ENV_TEST_*".into()], &set);
        assert!(env
            .iter()
            .any(|(k, v)| k == "TOOLPOOL_ENV_TEST_SECRET" && v == "x"));
        let keys: Vec<_> = env
            .iter()
            .filter(|(k, _)| k == "TOOLPOOL_ENV_TEST_KEY")
            .collect();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].1, "from file");
    }

    #[test]
    fn env_files_are_read_as_dotenv_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".env");
        std::fs::write(
            &path,
            "# keys\n\nSERPER_DEV_API_KEY=abc123\nexport JINA_API_KEY = 'x y # z'\n\
             QUOTED=\"line\\nnext \\\"q\\\"\" # comment\nPLAIN=v # trailing\nEMPTY=\nPLAIN=w\n",
        )
        .unwrap();
        let vars = read_env_file(&path).unwrap();
        let get = |n: &str| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("SERPER_DEV_API_KEY"), Some("abc123"));
        assert_eq!(get("JINA_API_KEY"), Some("x y # z"));
        assert_eq!(get("QUOTED"), Some("line\nnext \"q\""));
        assert_eq!(get("PLAIN"), Some("w"));
        assert_eq!(get("EMPTY"), Some(""));
        assert_eq!(vars.len(), 5);
    }

    #[test]
    fn bad_env_file_lines_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".env");
        for (text, expected) in [
            ("OK=1\nno equals sign\n", ":2: expected NAME=value"),
            ("1X=2\n", ":1: \"1X\" is not a variable name"),
            ("A='open\n", ":1: a single-quoted value is not closed"),
            (
                "A=\"x\" y\n",
                ":1: unexpected \"y\" after the closing quote",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = read_env_file(&path).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            assert!(error.starts_with(&path.display().to_string()), "{error}");
        }
    }
}
