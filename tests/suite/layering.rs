//! The module graph has no cycles: in the crate (`crate::` paths in code,
//! not in comments or unit tests), inside each of its folders (between the
//! files and folders a `mod.rs` declares), and in the Python shim (its
//! relative imports). A cycle is printed as the path that closes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path, extension: &str, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, extension, found);
        } else if path.extension().is_some_and(|e| e == extension) && !is_test_file(&path) {
            found.push(path);
        }
    }
}

/// A file of unit tests (`tests.rs`, `*_tests.rs`): declared under
/// `#[cfg(test)]`, so not part of the layering.
fn is_test_file(path: &Path) -> bool {
    let name = path.file_stem().unwrap_or_default().to_string_lossy();
    name == "tests" || name.ends_with("_tests")
}

/// Code without `//` comments, and without what is compiled for unit tests
/// only: each `#[cfg(test)]` item is taken out up to its `;` or the brace
/// that closes its body (`mod frame_decoder_tests;`, `fn to_marshal(..) {
/// .. }`, `mod tests { .. }`).
fn code_of(text: &str) -> String {
    const TEST_ONLY: &str = "#[cfg(test)]";
    let mut kept = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(TEST_ONLY) {
        kept.push_str(&rest[..at]);
        rest = after_item(&rest[at + TEST_ONLY.len()..]);
    }
    kept.push_str(rest);
    kept.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What follows the item `text` starts with: past its `;`, or past the
/// brace that closes its body.
fn after_item(text: &str) -> &str {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            ';' if depth == 0 => return &text[at + 1..],
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return &text[at + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

/// The top-level module a file of `src/` belongs to.
fn rust_module(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn rust_graph() -> Graph {
    let src = root().join("src");
    let mut sources = Vec::new();
    files(&src, "rs", &mut sources);
    let modules: BTreeSet<String> = sources.iter().map(|f| rust_module(&src, f)).collect();
    let mut graph = Graph::new();
    for file in &sources {
        let module = rust_module(&src, file);
        // The binary is a crate of its own (`the_binary_is_on_the_public_api`).
        if module == "lib" || module == "bin" {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let edges = graph.entry(module.clone()).or_default();
        // `crate::name` anywhere, and the names inside `use crate::{a, b::c}`.
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                group.split(',').map(|part| part.trim()).collect()
            } else {
                vec![rest]
            };
            for name in names {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if modules.contains(&name) && name != module {
                    edges.insert(name);
                }
            }
        }
    }
    graph
}

/// The names a piece of code reaches in `folder` (whose path from `src/` is
/// `path`, e.g. `config` or `context::attachments`): `super::NAME` when
/// written `depth` levels below it, and `crate::PATH::NAME` anywhere.
fn reached_in(code: &str, path: &str, depth: usize, names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut reached = BTreeSet::new();
    let prefixes = ["super::".repeat(depth), format!("crate::{path}::")];
    for prefix in prefixes {
        for (at, _) in code.match_indices(&prefix) {
            // Not the tail of a longer `super::super::`.
            if code[..at].ends_with("super::") {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            let parts: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap_or(group.len())]
                    .split(',')
                    .map(str::trim)
                    .collect(),
                None => vec![rest],
            };
            for part in parts {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if names.contains(&name) {
                    reached.insert(name);
                }
            }
        }
    }
    reached
}

/// For each folder of `src/` (at any depth), the graph between its files
/// and folders (`mod.rs`, which declares them, left out).
fn folder_graphs() -> BTreeMap<String, Graph> {
    fn walk(dir: &Path, path: &str, graphs: &mut BTreeMap<String, Graph>) {
        // A child module's files: `name.rs` and what is under `name/` (or
        // `name/mod.rs` and the rest of `name/`).
        let mut children: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let child = entry.unwrap().path();
            let name = child.file_stem().unwrap().to_string_lossy().to_string();
            if child.is_dir() {
                walk(&child, &format!("{path}::{name}"), graphs);
                files(&child, "rs", children.entry(name).or_default());
            } else if child.extension().is_some_and(|e| e == "rs")
                && name != "mod"
                && !is_test_file(&child)
            {
                children.entry(name).or_default().push(child);
            }
        }
        let names: BTreeSet<String> = children.keys().cloned().collect();
        let mut graph = Graph::new();
        for (name, sources) in &children {
            let edges = graph.entry(name.clone()).or_default();
            for source in sources {
                // How far below the folder the file's own module is.
                let below = source.strip_prefix(dir).unwrap().components().count();
                let depth = match source.file_stem().is_some_and(|s| s == "mod") {
                    true => below - 1,
                    false => below,
                };
                let code = code_of(&std::fs::read_to_string(source).unwrap());
                edges.extend(
                    reached_in(&code, path, depth, &names)
                        .into_iter()
                        .filter(|reached| reached != name),
                );
            }
        }
        graphs.insert(path.to_string(), graph);
    }
    let src = root().join("src");
    let mut graphs = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() {
            let name = dir.file_name().unwrap().to_string_lossy().to_string();
            walk(&dir, &name, &mut graphs);
        }
    }
    graphs
}

fn python_graph() -> Graph {
    let shim = root().join("python_shim/toolpool_shim");
    let mut sources = Vec::new();
    files(&shim, "py", &mut sources);
    let mut graph = Graph::new();
    for file in &sources {
        let module = file.file_stem().unwrap().to_string_lossy().to_string();
        let edges = graph.entry(module.clone()).or_default();
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let line = line.trim();
            // `from .x import y` and `from . import x, y` (inside functions too).
            if let Some(rest) = line.strip_prefix("from .") {
                let (target, imported) = rest.split_once(" import ").unwrap_or((rest, ""));
                let targets: Vec<String> = if target.is_empty() {
                    imported
                        .split(',')
                        .map(|n| n.trim().split(' ').next().unwrap_or("").to_string())
                        .collect()
                } else {
                    vec![target.split('.').next().unwrap_or("").to_string()]
                };
                for target in targets {
                    if !target.is_empty() && target != module {
                        edges.insert(target);
                    }
                }
            }
        }
    }
    graph
}

/// The first cycle found, as the modules along it.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

#[test]
fn the_crate_has_no_module_cycles() {
    let graph = rust_graph();
    // The graph was read: the layers the design names are there.
    assert!(graph["pool"].contains("worker"), "{graph:?}");
    assert!(graph["worker"].contains("protocol"), "{graph:?}");
    if let Some(cycle) = cycle(&graph) {
        panic!("module cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn no_folder_has_a_cycle_inside() {
    let graphs = folder_graphs();
    // The graphs were read: edges the code is known to have are there.
    assert!(
        graphs["worker"]["spawn"].contains("launch"),
        "{:?}",
        graphs["worker"]
    );
    assert!(
        graphs["config"]["load"].contains("reader"),
        "{:?}",
        graphs["config"]
    );
    for (folder, graph) in &graphs {
        if let Some(cycle) = cycle(graph) {
            panic!("module cycle in src/{folder}: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn names_reached_in_a_folder_are_read_at_their_depth() {
    let names: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let code = "use super::a::X;\nuse super::super::b;\nuse crate::f::{c, z};\n";
    assert_eq!(
        reached_in(code, "f", 1, &names),
        BTreeSet::from(["a".into(), "c".into()])
    );
    assert_eq!(
        reached_in(code, "f", 2, &names),
        BTreeSet::from(["b".into(), "c".into()])
    );
}

#[test]
fn the_lower_layers_do_not_reach_up() {
    let graph = rust_graph();
    let rules: [(&str, &[&str]); 4] = [
        ("worker", &["pool", "context", "http", "mcp"]),
        ("protocol", &["worker", "pool", "http", "mcp"]),
        // How calls and workers end: made by the worker and the pool, and
        // shown by every front end, so it depends on none of them.
        ("outcome", &["worker", "pool", "context", "http", "mcp"]),
        // Workflow files are read and validated without a pool; calling a
        // node's tools through one is `node_calls`' job.
        ("config", &["pool", "worker", "http", "mcp"]),
    ];
    for (module, forbidden) in rules {
        for name in forbidden {
            assert!(
                !graph[module].contains(*name),
                "{module} uses {name}: {:?}",
                graph[module]
            );
        }
    }
}

/// The `toolpool` binary stands on the library's public API alone, as any
/// other front end would: it reaches nothing of the library by `crate::`
/// (only its own modules), and the library hides no module for it.
#[test]
fn the_binary_is_on_the_public_api() {
    let bin = root().join("src/bin/toolpool");
    let mut sources = Vec::new();
    files(&bin, "rs", &mut sources);
    assert!(sources.len() > 5, "{sources:?}");
    let own: BTreeSet<String> = std::fs::read_to_string(bin.join("main.rs"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .map(String::from)
        .collect();
    assert!(own.contains("cli"), "{own:?}");
    let mut reached = Vec::new();
    for file in &sources {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !own.contains(&name) {
                reached.push(format!("{}: crate::{name}", file.display()));
            }
        }
    }
    assert!(reached.is_empty(), "{reached:#?}");
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    assert!(!lib.contains("doc(hidden)"), "src/lib.rs hides a module");
}

/// One owner kills a worker: its actor. The worker's processes (the type
/// that holds their pidfds and signals them) are named only by the actor's
/// files and `process.rs`, and a pidfd is opened only there and by the
/// template (for the guardian it clones, handed to the actor). Everyone else
/// pulls the worker's kill switch.
#[test]
fn only_the_worker_actor_holds_a_workers_processes() {
    let src = root().join("src");
    let mut sources = Vec::new();
    files(&src, "rs", &mut sources);
    let actor = [
        "worker/actor.rs",
        "worker/lifecycle.rs",
        "worker/exchange.rs",
        "worker/dump.rs",
    ];
    let mut named = Vec::new();
    for file in &sources {
        let relative = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let holds = code.contains("WorkerProcesses");
        let opens = code.contains("pidfd_open");
        if relative == "process.rs" {
            continue;
        }
        if holds && !actor.contains(&relative.as_str()) {
            named.push(format!("{relative}: WorkerProcesses"));
        }
        if opens && !["worker/actor.rs", "worker/template.rs"].contains(&relative.as_str()) {
            named.push(format!("{relative}: pidfd_open"));
        }
    }
    assert!(named.is_empty(), "{named:#?}");
    let process = std::fs::read_to_string(src.join("process.rs")).unwrap();
    let declared = process
        .find("pub(crate) struct WorkerProcesses")
        .expect("WorkerProcesses is declared in process.rs");
    let lines: Vec<&str> = process[..declared].lines().collect();
    let derives = lines.last().copied().unwrap_or_default();
    assert!(
        !derives.contains("Clone"),
        "WorkerProcesses can be cloned: {derives}"
    );
    let pool = ["pool/dispatch.rs", "pool/mod.rs", "pool/lease.rs"];
    for file in pool {
        let code = code_of(&std::fs::read_to_string(src.join(file)).unwrap());
        assert!(!code.contains("kill_now"), "{file} kills a worker itself");
    }
}

/// The trace context (checked W3C headers) and the OpenTelemetry exporter's
/// set-up are leaves: the pool, the wire and the MCP server use them, they
/// use nothing of the crate.
#[test]
fn trace_context_and_telemetry_are_leaves() {
    let graph = rust_graph();
    for module in ["trace_context", "telemetry"] {
        let uses = graph.get(module).cloned().unwrap_or_default();
        assert!(uses.is_empty(), "{module} uses {uses:?}");
    }
    assert!(graph["protocol"].contains("trace_context"), "{graph:?}");
}

/// Every source file can be read in one sitting.
#[test]
fn no_source_file_is_over_600_lines() {
    // Unit-test files too (`files` leaves them out of the layering).
    fn every_file(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => every_file(&path, found),
                false => found.push(path),
            }
        }
    }
    let mut sources = Vec::new();
    every_file(&root().join("src"), &mut sources);
    let mut long: Vec<String> = Vec::new();
    for file in sources
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let lines = std::fs::read_to_string(file).unwrap().lines().count();
        if lines > 600 {
            long.push(format!("{} ({lines} lines)", file.display()));
        }
    }
    assert!(long.is_empty(), "over 600 lines: {long:?}");
}

/// The files `#[cfg(test)] mod name;` declares: unit tests and models.
fn test_only_files(sources: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    for file in sources {
        let text = std::fs::read_to_string(file).unwrap();
        // A `foo.rs` declares its modules in `foo/`; `mod.rs`, `lib.rs`
        // beside itself.
        let stem = file.file_stem().unwrap_or_default();
        let dir = match stem == "mod" || stem == "lib" || stem == "main" {
            true => file.parent().unwrap().to_path_buf(),
            false => file.with_extension(""),
        };
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let declared = lines.by_ref().find(|l| !l.starts_with("#["));
            if let Some(name) = declared
                .and_then(|l| l.strip_prefix("mod "))
                .and_then(|l| l.strip_suffix(';'))
            {
                found.insert(dir.join(format!("{name}.rs")));
                found.insert(dir.join(name).join("mod.rs"));
            }
        }
    }
    found
}

/// The functions of `text` longer than `limit` lines, outside `#[cfg(test)]`
/// items: a function ends at the line that is its own indentation and `}`
/// (the code is rustfmt's).
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize)> {
    let code = code_of(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut long = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let Some(name) = body
            .split_once("fn ")
            .filter(|(head, _)| {
                head.split_whitespace().all(|word| {
                    ["pub", "const", "async", "unsafe", "extern", "\"C\""].contains(&word)
                        || word.starts_with("pub(")
                })
            })
            .map(|(_, rest)| rest.split(['(', '<']).next().unwrap_or(""))
        else {
            continue;
        };
        if body.trim_end().ends_with('}') {
            continue; // on one line
        }
        // A declaration without a body (a trait's) ends at its `;`.
        let signature_end = lines[at..]
            .iter()
            .find(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'));
        if signature_end.is_none_or(|l| l.trim_end().ends_with(';')) {
            continue;
        }
        let close = format!("{indent}}}");
        let length = lines[at..]
            .iter()
            .position(|l| l.trim_end() == close)
            .map_or(lines.len() - at, |end| end + 1);
        if length > limit {
            long.push((name.to_string(), length));
        }
    }
    long
}

/// Every function can be read on one screen or two: none is over 100 lines
/// outside unit tests and models.
#[test]
fn no_function_is_over_100_lines() {
    let mut sources = Vec::new();
    files(&root().join("src"), "rs", &mut sources);
    let test_only = test_only_files(&sources);
    let mut long = Vec::new();
    for file in sources.iter().filter(|f| !test_only.contains(*f)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (name, lines) in long_functions(&text, 100) {
            long.push(format!("{} {name} ({lines} lines)", file.display()));
        }
    }
    assert!(long.is_empty(), "over 100 lines: {long:#?}");
}

#[test]
fn a_long_function_is_found_and_a_declaration_is_not() {
    let body = "    x();\n".repeat(3);
    let text = format!(
        "pub(crate) async fn long(\n    a: u8,\n) {{\n{body}}}\nfn short() {{}}\n\
         trait T {{\n    fn declared(\n        &self,\n    );\n}}\n\
         #[cfg(test)]\nfn tested() {{\n{body}}}\n"
    );
    assert_eq!(long_functions(&text, 4), [("long".to_string(), 7)]);
}

#[test]
fn the_shim_has_no_import_cycles() {
    let graph = python_graph();
    assert!(graph["worker"].contains("channel"), "{graph:?}");
    if let Some(cycle) = cycle(&graph) {
        panic!("import cycle in the shim: {}", cycle.join(" -> "));
    }
}

#[test]
fn only_test_code_is_left_out() {
    let text = "use crate::a;\n#[cfg(test)]\nmod model;\nuse crate::b;\n\
                #[cfg(test)]\npub fn helper() { if x { crate::t1(); } }\nfn f() { crate::c(); }\n\
                #[cfg(test)]\nmod tests {\n    use crate::t2;\n}\n";
    let code = code_of(text);
    for kept in ["crate::a", "crate::b", "crate::c"] {
        assert!(code.contains(kept), "{kept} dropped: {code}");
    }
    for dropped in ["model", "crate::t1", "crate::t2"] {
        assert!(!code.contains(dropped), "{dropped} kept: {code}");
    }
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let graph: Graph = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_string(), BTreeSet::from([to.to_string()])))
        .collect();
    assert_eq!(cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
}
