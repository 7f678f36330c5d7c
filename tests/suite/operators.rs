//! What an operator or a newcomer meets at the command line: the log
//! (colour, level), what is left on disk, the `NotFound` text, the table on
//! a terminal, the help, shell completions, and the README's tool example.

use std::path::Path;
use std::process::Command;

use crate::common::{fixtures, run, toolpool_command};

/// Runs `toolpool ARGS` with stdout and stderr on a pseudo-terminal of
/// `columns` columns (Python's `pty`, standard library); the output is both
/// streams, in order, with `\r\n` made `\n`.
fn in_terminal(columns: u16, args: &[&str]) -> Command {
    const PTY: &str = r#"
import fcntl, os, struct, subprocess, sys, termios
columns, command = int(sys.argv[1]), sys.argv[2:]
master, slave = os.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
os.close(slave)
output = b""
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:  # EIO: every writer closed the terminal
        break
    if not chunk:
        break
    output += chunk
sys.stdout.buffer.write(output.replace(b"\r\n", b"\n"))
sys.exit(child.wait())
"#;
    let mut command = Command::new("python3");
    command
        .arg("-c")
        .arg(PTY)
        .arg(columns.to_string())
        .arg(env!("CARGO_BIN_EXE_toolpool"))
        .args(args)
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG");
    command
}

/// The binary with nothing set from outside: no functions directory, no
/// session directory, the default log level.
fn bare_toolpool(cwd: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS")
        .env_remove("MAC_FUNCTIONS_DIR")
        .env_remove("TOOLPOOL_FUNCTIONS_DIR")
        .env_remove("TOOLPOOL_SESSION_DIR");
    command
}

const ESC: &str = "\x1b[";

#[test]
fn log_is_coloured_only_on_a_terminal_unless_told() {
    let session = tempfile::tempdir().unwrap();
    // The fixtures hold modules that fail to import: each is a WARN line.
    let piped = run(toolpool_command(session.path())
        .arg("catalog")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG"));
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    assert!(piped.stderr.contains("WARN"), "{}", piped.stderr);
    assert!(!piped.stderr.contains(ESC), "{:?}", piped.stderr);
    let forced = run(toolpool_command(session.path())
        .args(["--color", "always", "catalog"])
        .env("NO_COLOR", "1"));
    assert!(forced.stderr.contains(ESC), "{:?}", forced.stderr);

    let fixtures = fixtures();
    let fixtures = fixtures.to_str().unwrap();
    let session_dir = session.path().to_str().unwrap();
    let base = ["--functions-dir", fixtures, "--session-dir", session_dir];
    let terminal = |extra: &[&str], no_color: bool| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let mut command = in_terminal(200, &args);
        if no_color {
            command.env("NO_COLOR", "1");
        }
        run(&mut command)
    };
    let coloured = terminal(&["catalog", "--format", "table"], false);
    assert_eq!(coloured.code, 0, "{}", coloured.stdout);
    assert!(coloured.stdout.contains("WARN"), "{}", coloured.stdout);
    assert!(coloured.stdout.contains(ESC), "{:?}", coloured.stdout);
    let no_color = terminal(&["catalog", "--format", "table"], true);
    assert!(no_color.stdout.contains("WARN"), "{}", no_color.stdout);
    assert!(!no_color.stdout.contains(ESC), "{:?}", no_color.stdout);
    let never = terminal(&["--color", "never", "catalog", "--format", "table"], false);
    assert!(!never.stdout.contains(ESC), "{:?}", never.stdout);
}

#[test]
fn quiet_and_verbose_set_the_log_level_over_rust_log() {
    let session = tempfile::tempdir().unwrap();
    let quiet = run(toolpool_command(session.path())
        .args(["-q", "catalog"])
        .env("RUST_LOG", "debug"));
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert_eq!(quiet.stderr, "", "-q logs errors only");

    // The bundled-tools notice is for -v only.
    let empty = tempfile::tempdir().unwrap();
    let default = run(bare_toolpool(empty.path()).arg("list"));
    assert_eq!(default.code, 0, "{}", default.stderr);
    assert!(
        !default.stderr.contains("bundled tools"),
        "{}",
        default.stderr
    );
    let verbose = run(bare_toolpool(empty.path()).args(["-v", "list"]));
    assert_eq!(verbose.code, 0, "{}", verbose.stderr);
    assert!(
        verbose.stderr.contains("using the bundled tools"),
        "{}",
        verbose.stderr
    );
    assert!(verbose.stderr.contains("DEBUG"), "{}", verbose.stderr);
}

#[test]
fn a_failed_call_is_told_once_and_its_traceback_at_verbose() {
    let session = tempfile::tempdir().unwrap();
    let args = [
        "call",
        "raise_value_error",
        "--args",
        r#"{"message": "nope"}"#,
    ];
    let default = run(toolpool_command(session.path()).args(args));
    assert_eq!(default.code, 1);
    assert_eq!(
        default.stdout,
        "Tool raise_value_error error: ValueError: nope\n"
    );
    assert!(
        !default.stderr.contains("ValueError") && !default.stderr.contains("Traceback"),
        "the text is on stdout, not again in the log: {}",
        default.stderr
    );
    let verbose = run(toolpool_command(session.path()).arg("-v").args(args));
    assert_eq!(verbose.code, 1);
    assert!(
        verbose.stderr.contains("Traceback"),
        "-v logs the traceback: {}",
        verbose.stderr
    );
}

#[test]
fn read_only_commands_leave_nothing_behind() {
    let cwd = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let workflow = cwd.path().join("workflow.yaml");
    std::fs::write(
        &workflow,
        "nodes:\n  - id: A\n    type: agent\n    config:\n      tooling:\n        - type: function\n          config:\n            tools:\n              - name: get_current_time\n",
    )
    .unwrap();
    for args in [
        &["catalog"][..],
        &["catalog", "--format", "table"],
        &["list"],
        &["check", "workflow.yaml"],
        &["resolve", "workflow.yaml"],
    ] {
        let done = run(bare_toolpool(cwd.path())
            .args(args)
            .env("TMPDIR", tmp.path())
            .env("TOOLPOOL_CACHE_DIR", cache.path()));
        assert_eq!(done.code, 0, "{args:?}: {}", done.stderr);
        let left: Vec<_> = std::fs::read_dir(cwd.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["workflow.yaml"], "{args:?} left files behind");
        let temporary: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            temporary.is_empty(),
            "{args:?} left its temporary session: {temporary:?}"
        );
    }
}

#[test]
fn not_found_names_the_directory_and_that_the_bundled_tools_are_hidden() {
    let cwd = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    let local = cwd.path().join("functions/function_calling");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(
        local.join("temps.py"),
        "def celsius() -> float:\n    \"\"\"Room temperature.\"\"\"\n    return 21.5\n",
    )
    .unwrap();
    let local = local.canonicalize().unwrap();
    let by_default = run(bare_toolpool(cwd.path())
        .args(["--session-dir"])
        .arg(session.path())
        .args(["call", "get_current_time"]));
    assert_eq!(by_default.code, 1, "{}", by_default.stderr);
    assert_eq!(
        by_default.stdout,
        format!(
            "Tool get_current_time error: NotFound: function 'get_current_time' not found under \
             function directory {}; the bundled tools are not used, since functions/function_calling \
             exists in the current directory (--functions-dir chooses the directory)\n",
            local.display()
        )
    );
    // Given on purpose: the directory is named, and nothing said of the bundled tools.
    let chosen = run(bare_toolpool(cwd.path())
        .arg("--functions-dir")
        .arg("functions/function_calling")
        .arg("--session-dir")
        .arg(session.path())
        .args(["call", "celsiu"]));
    assert_eq!(chosen.code, 1);
    assert_eq!(
        chosen.stdout,
        format!(
            "Tool celsiu error: NotFound: function 'celsiu' not found under function directory {} \
             (did you mean 'celsius'?)\n",
            local.display()
        )
    );
}

#[test]
fn catalog_table_fits_the_terminal_and_is_whole_in_a_pipe() {
    let empty = tempfile::tempdir().unwrap();
    let mut command = in_terminal(80, &["catalog", "--format", "table"]);
    let on_terminal = run(command.current_dir(empty.path()));
    assert_eq!(on_terminal.code, 0, "{}", on_terminal.stdout);
    assert!(on_terminal.stdout.contains("get_current_time"));
    for line in on_terminal.stdout.lines() {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(on_terminal.stdout.contains('…'), "{}", on_terminal.stdout);
    let piped = run(bare_toolpool(empty.path()).args(["catalog", "--format", "table"]));
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    let widest = piped.stdout.lines().map(|l| l.chars().count()).max();
    assert!(widest > Some(80), "a pipe gets every cell in full");
}

fn help(args: &[&str]) -> String {
    let done = run(Command::new(env!("CARGO_BIN_EXE_toolpool")).args(args));
    assert_eq!(done.code, 0, "{args:?}: {}", done.stderr);
    done.stdout
}

/// Where `needle` is in `text`, for order checks.
fn at(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in:\n{text}"))
}

#[test]
fn help_puts_pool_options_apart_and_hides_idle_ones() {
    let top = help(&["--help"]);
    for part in [
        "Pool options:",
        "Log options:",
        "Exit codes:",
        "124",
        "RUST_LOG",
        "NO_COLOR",
        "TOOLPOOL_FUNCTIONS_DIR",
        "MAC_FUNCTIONS_DIR",
    ] {
        at(&top, part);
    }
    let call = help(&["call", "--help"]);
    let own = at(&call, "Call options:");
    let pool = at(&call, "Pool options:");
    assert!(own < at(&call, "--args <ARGS>") && at(&call, "--args <ARGS>") < pool);
    assert!(at(&call, "--functions-dir") > pool, "{call}");
    assert!(!call.contains("--spare-workers"), "{call}");
    for command in ["check", "resolve"] {
        let text = help(&[command, "--help"]);
        for idle in [
            "--memory-limit",
            "--spare-workers",
            "--max-calls-per-worker",
        ] {
            assert!(!text.contains(idle), "{command} shows {idle}:\n{text}");
        }
        at(&text, "--functions-dir");
    }
    let list = help(&["list", "--help"]);
    let json = &list[at(&list, "--json")..];
    let line = json.lines().next().unwrap();
    assert!(
        line.trim_end().len() > "--json".len(),
        "--json has help: {list}"
    );
    let bench = help(&["bench", "--help"]);
    at(&bench, "Pool sizes to measure");
    // Hidden, still accepted.
    let session = tempfile::tempdir().unwrap();
    let ok = run(toolpool_command(session.path()).args(["--spare-workers", "2", "list"]));
    assert_eq!(ok.code, 0, "{}", ok.stderr);
}

#[test]
fn option_errors_speak_of_the_command_at_hand() {
    let done =
        run(Command::new(env!("CARGO_BIN_EXE_toolpool")).args(["--workers", "0", "call", "add"]));
    assert_eq!(done.code, 2);
    assert!(
        done.stderr.contains("not a number of workers"),
        "{}",
        done.stderr
    );
    assert!(!done.stderr.contains("list"), "{}", done.stderr);
    let done =
        run(Command::new(env!("CARGO_BIN_EXE_toolpool")).args(["bench", "--workers", "1,x"]));
    assert_eq!(done.code, 2);
    assert!(
        done.stderr.contains("list of pool sizes"),
        "{}",
        done.stderr
    );
}

#[test]
fn completions_are_scripts_for_each_shell() {
    let bash = help(&["completions", "bash"]);
    assert!(bash.contains("complete -F _toolpool"), "{bash}");
    assert!(bash.contains("--functions-dir"), "{bash}");
    let syntax = Command::new("bash")
        .arg("-n")
        .arg("-c")
        .arg(&bash)
        .output()
        .expect("bash runs");
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    assert!(help(&["completions", "zsh"]).starts_with("#compdef toolpool"));
    assert!(help(&["completions", "fish"]).contains("complete -c toolpool"));
    let bad = run(Command::new(env!("CARGO_BIN_EXE_toolpool")).args(["completions", "tcsh"]));
    assert_eq!(bad.code, 2);
}

#[test]
fn either_functions_dir_variable_is_read_and_toolpool_s_wins() {
    let empty = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    let list = |vars: &[(&str, &Path)]| {
        let mut command = bare_toolpool(empty.path());
        command.arg("--session-dir").arg(session.path()).arg("list");
        for (name, value) in vars {
            command.env(name, value);
        }
        run(&mut command)
    };
    let fixtures = fixtures();
    let nowhere = Path::new("/nonexistent/tools");
    for vars in [
        &[("TOOLPOOL_FUNCTIONS_DIR", fixtures.as_path())][..],
        &[("MAC_FUNCTIONS_DIR", fixtures.as_path())],
        &[
            ("TOOLPOOL_FUNCTIONS_DIR", fixtures.as_path()),
            ("MAC_FUNCTIONS_DIR", nowhere),
        ],
    ] {
        let done = list(vars);
        assert_eq!(done.code, 0, "{vars:?}: {}", done.stderr);
        assert!(
            done.stdout.lines().any(|l| l == "behave:All"),
            "{vars:?}: {}",
            done.stdout
        );
    }
}

/// The README's "Writing a tool" example, as written there, run as the
/// README says.
#[test]
fn the_readme_tool_example_runs() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = &readme[at(&readme, "## Writing a tool")..];
    let code = &section[at(section, "```python\n") + "```python\n".len()..];
    let code = &code[..at(code, "```")];
    let shown = &section[at(section, "```sh\n$ ") + "```sh\n$ ".len()..];
    let (command_line, rest) = shown.split_once('\n').unwrap();
    let expected = rest.lines().next().unwrap();
    assert!(
        command_line
            .starts_with("toolpool --functions-dir my_tools call convert_temperature --args '"),
        "{command_line}"
    );
    let args = command_line
        .rsplit_once(" --args '")
        .map(|(_, a)| a.trim_end_matches('\''))
        .unwrap();

    let cwd = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join("my_tools")).unwrap();
    std::fs::write(cwd.path().join("my_tools/temperature.py"), code).unwrap();
    let done = run(bare_toolpool(cwd.path())
        .args(["--functions-dir", "my_tools", "--session-dir"])
        .arg(session.path())
        .args(["call", "convert_temperature", "--args", args]));
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.stdout.trim_end(), expected);
    let back = run(bare_toolpool(cwd.path())
        .args(["--functions-dir", "my_tools", "--session-dir"])
        .arg(session.path())
        .args([
            "call",
            "convert_temperature",
            "--args",
            r#"{"value": 212, "unit": "F"}"#,
        ]));
    assert_eq!(back.stdout, "100.0 °C\n", "{}", back.stderr);
}

#[test]
fn bench_draws_a_bar_per_pool_size_on_a_terminal() {
    let session = tempfile::tempdir().unwrap();
    let session = session.path().to_str().unwrap();
    let mut command = in_terminal(
        120,
        &[
            "--session-dir",
            session,
            "bench",
            "--workers",
            "1,2",
            "--calls",
            "30",
            "--concurrency",
            "4",
        ],
    );
    let done = run(&mut command);
    assert_eq!(done.code, 0, "{}", done.stdout);
    // Each bar is left in place when its size is done, full.
    for prefix in ["1 worker ", "2 workers"] {
        assert!(
            done.stdout.lines().any(|l| l.contains(prefix)
                && l.contains("30/30 calls (")
                && l.contains("calls/s")),
            "no finished bar for {prefix:?}:\n{}",
            done.stdout
        );
    }
}

/// The README, CONTRIBUTING.md, the CHANGELOG and every file of docs/.
fn documents() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut documents = vec![
        root.join("README.md"),
        root.join("CONTRIBUTING.md"),
        root.join("CHANGELOG.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            documents.push(path);
        }
    }
    documents
}

/// Every file or folder of the repository that the README and docs/ name
/// (in backticks, or as a relative link) exists: the docs follow the code.
#[test]
fn every_file_the_docs_name_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let documents = documents();
    const TOP: [&str; 7] = [
        "src/",
        "tests/",
        "python_shim/",
        "benches/",
        "scripts/",
        "functions/",
        "docs/",
    ];
    let mut missing = Vec::new();
    for document in &documents {
        let text = std::fs::read_to_string(document).unwrap();
        let base = document.parent().unwrap();
        // `path` in backticks, from the repository's root.
        for quoted in text.split('`').skip(1).step_by(2) {
            let candidate = quoted.trim_end_matches(['.', ',', ':']);
            let is_path = TOP.iter().any(|top| candidate.starts_with(top))
                && !candidate.contains(['*', ' ', '<', '{', '…']);
            if is_path && !root.join(candidate).exists() {
                missing.push(format!("{}: `{candidate}`", document.display()));
            }
        }
        // [text](relative/path#anchor), from the document's folder.
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !base.join(target).exists() {
                missing.push(format!("{}: ]({target})", document.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named but missing:\n{}",
        missing.join("\n")
    );
}

/// `text` split into words as a shell would (single and double quotes, no
/// expansions).
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The `toolpool …` command lines a document shows: in shell blocks
/// (fenced as `sh`, `bash`, `shell` or `console`; a
/// `$ ` prompt, `\` continuations and leading `NAME=value` settings
/// allowed) and in backticks; a comment or what follows `;` or a pipe is
/// not part of it, nor is a redirection. Lines with placeholders (`<id>`,
/// `...`) are not commands. Each as its words.
fn command_lines(text: &str) -> Vec<Vec<String>> {
    let mut candidates = Vec::new();
    // Outside a block, or in one: shell or not.
    let mut block: Option<bool> = None;
    let mut joined = String::new();
    for line in text.lines() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            block = match block {
                Some(_) => None,
                None => Some(matches!(fence.trim(), "sh" | "bash" | "shell" | "console")),
            };
            continue;
        }
        if block == Some(false) {
            continue;
        }
        if block == Some(true) {
            match line.strip_suffix('\\') {
                Some(start) => joined.push_str(start),
                None => {
                    joined.push_str(line);
                    candidates.push(std::mem::take(&mut joined));
                }
            }
        } else {
            candidates.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    candidates
        .iter()
        .filter_map(|line| {
            let line = line.trim().trim_start_matches("$ ");
            let line = line.split(" #").next().unwrap_or(line);
            let line = line.split([';', '|']).next().unwrap_or(line);
            let mut words = shell_words(line);
            if let Some(end) = words
                .iter()
                .position(|w| w.starts_with(['>', '&']) || w.starts_with("2>"))
            {
                words.truncate(end);
            }
            while words.first().is_some_and(|w| {
                w.contains('=') && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            }) {
                words.remove(0);
            }
            let placeholder = words.iter().any(|w| w.contains(['<', '…']) || w == "...");
            (words.first().map(String::as_str) == Some("toolpool")
                && words.len() > 1
                && !placeholder)
                .then_some(words)
        })
        .collect()
}

/// Every `toolpool …` command line the README and docs/ show parses:
/// `--help` appended, it prints help and exits 0 (clap checks every word
/// before it). A line that ends in an option taking a value names the
/// option (`serve --http`), and is checked up to it.
#[test]
fn every_command_line_the_docs_show_parses() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text = std::fs::read_to_string(&document).unwrap();
        for words in command_lines(&text) {
            let line = words.join(" ");
            let output = Command::new(env!("CARGO_BIN_EXE_toolpool"))
                .args(&words[1..])
                .arg("--help")
                .env_remove("TOOLPOOL_FUNCTIONS_DIR")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = words.last().map(String::as_str).unwrap_or("");
            let names_an_option = last.starts_with("--")
                && stderr.contains(&format!("a value is required for '{last}"));
            checked += 1;
            if !output.status.success() && !names_an_option {
                bad.push(format!("{}: {line}\n{stderr}", document.display()));
            }
        }
    }
    assert!(checked >= 20, "only {checked} command lines found");
    assert!(
        bad.is_empty(),
        "command lines that do not parse:\n{}",
        bad.join("\n")
    );
}

/// The README's "From Rust" block is the crate page's example (src/lib.rs),
/// which `cargo test --doc` compiles and runs: the same lines, less the
/// hidden set-up.
#[test]
fn the_readme_rust_example_is_the_crate_pages_doctest() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[at(&readme, "## From Rust")..];
    let block = &section[at(section, "```rust\n") + "```rust\n".len()..];
    let block = &block[..at(block, "```")];
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let doc: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect();
    let start = doc.iter().position(|l| *l == "```").expect("a doc example") + 1;
    let end = start + doc[start..].iter().position(|l| *l == "```").unwrap();
    let shown: Vec<&str> = doc[start..end]
        .iter()
        .filter(|l| !(l.starts_with("# ") || **l == "#"))
        .copied()
        .collect();
    assert_eq!(block.lines().collect::<Vec<_>>(), shown);
}
