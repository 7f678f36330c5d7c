//! The catalog: every tool function with its JSON Schema, as a worker built it
//! (see `python_shim/toolpool_shim/catalog.py`), and the views front ends
//! print: JSON, OpenAI tool specs, a table, and the `module:All` option list.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One tool function.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FunctionSpec {
    /// The function's name, which is the tool's name; unique in the catalog.
    pub name: String,
    /// The module that defines it: its file's path relative to the functions
    /// directory without `.py`, `/` between folders (`sub/tools`).
    pub module: String,
    /// The docstring's first paragraph, lines joined by spaces, at most 600
    /// characters; `""` when there is no docstring.
    pub description: String,
    /// The JSON Schema of the arguments: `{"type": "object", "properties",
    /// "required"}` (docs/catalog.md has the type mapping).
    pub parameters: Value,
    /// Path relative to the functions directory.
    pub file: String,
    /// The line of the `def` in `file`, from 1.
    pub line: u32,
    /// The JSON Schema of the result, from the return annotation: always an
    /// object schema (MCP's `outputSchema`); `None` when the annotation says
    /// nothing (none, `Any`, `None`, an attachment result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The result is not an object: `output_schema` describes it as
    /// `{"result": <the result>}`, and that is how it is sent structured.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_wrapped: bool,
    /// A human-readable title the tool's author gave it (`mcp_title`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// MCP's behaviour hints the author gave it (`mcp_annotations`):
    /// `readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolHints>,
    /// The MCP resource the function serves instead of being a tool
    /// (`mcp_resource`); `None` for a tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceSpec>,
    /// Whether a call may run as an MCP task (`mcp_execution`'s
    /// `taskSupport`); `None` when the author said nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<TaskSupport>,
    /// Seconds a call of a task-supporting tool runs before it becomes a
    /// task (`mcp_task_after`); a question it asks before is a round trip
    /// of its request. `None`: a task from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_after: Option<f64>,
    /// The tool's own timeout in seconds (`toolpool.tool(timeout=...)`,
    /// `mcp_timeout`): a call's timeout when neither its caller nor a
    /// workflow file gives one, in place of the pool's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// Seconds its `finally` may take after a timeout, as it declares
    /// them (`@toolpool.tool(timeout_grace=…)`): in place of the pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_grace: Option<f64>,
}

/// Whether a tool's calls run as MCP tasks (the tasks extension), as its
/// author declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TaskSupport {
    /// Never a task: the call answers when it ends.
    Forbidden,
    /// A task from the start for a client that declares the extension.
    Optional,
    /// Always a task; a client without the extension is refused (-32021).
    Required,
}

/// The resource a function serves: read by `resources/read`, not listed as
/// a tool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResourceSpec {
    /// The resource's URI, or an RFC 6570 template whose `{name}`s are the
    /// function's parameters (`test://items/{id}`).
    pub uri: String,
    /// The MIME type of what it reads (`mcp_mime_type`); `text/plain` for a
    /// `str` result and `application/json` for other JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// MCP's behaviour hints for a tool (each absent when the author said nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolHints {
    /// `readOnlyHint`: the tool does not change its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`: a tool that changes its environment may delete or
    /// overwrite, rather than only add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`: calling it again with the same arguments changes
    /// nothing more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// `openWorldHint`: the tool reaches entities outside a closed domain
    /// (the web, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl FunctionSpec {
    /// The result as MCP's `structuredContent`: `value` (wrapped when the
    /// schema says so), or `None` when the function has no output schema or
    /// an unwrapped result is not an object ([`Self::has_structured_result`]).
    pub fn structured_result(&self, value: Value) -> Option<Value> {
        if !self.has_structured_result(&value) {
            return None;
        }
        Some(match self.output_wrapped {
            true => json!({ "result": value }),
            false => value,
        })
    }

    /// Whether `value` goes out as `structuredContent` too.
    pub fn has_structured_result(&self, value: &Value) -> bool {
        self.output_schema.is_some() && (self.output_wrapped || value.is_object())
    }
}

/// A module that failed to import, or a name defined twice.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LoadError {
    /// The module, named as [`FunctionSpec::module`] is.
    pub module: String,
    /// Its file, relative to the functions directory.
    pub file: String,
    /// What went wrong: the exception as `Type: message`,
    /// `DuplicateFunction: …` naming both definitions, or `cannot describe
    /// function …` when its schema could not be built.
    pub error: String,
}

/// Something the worker could not do as the project expects, though every
/// tool loaded: a project class the `_context` services cannot stand in for
/// (its tools then get toolpool's own class), say.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LoadWarning {
    /// The project module (`utils.attachments`).
    pub module: String,
    /// The module's file (its `__file__`); empty when it has none.
    pub file: String,
    /// What could not be done: the class and what it lacks.
    pub warning: String,
}

/// The tools of a functions directory, as a worker found them, and what it
/// could not load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Catalog {
    /// The functions directory the tools were loaded from (canonical).
    pub functions_dir: PathBuf,
    /// Sorted by module, then name.
    pub functions: Vec<FunctionSpec>,
    /// Modules that failed to load, names defined twice and functions whose
    /// schema could not be built; sorted by module.
    pub errors: Vec<LoadError>,
    /// What the worker could not do as the project expects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<LoadWarning>,
}

/// One entry of the `list` dropdown.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ListOption {
    /// What is shown: `module:All` or `module:function`.
    pub label: String,
    /// What a workflow's tool list takes: `module:All`, or the function's name.
    pub value: String,
    /// For `module:All`, the file and the functions it loads; else the
    /// function's description.
    pub description: String,
}

#[derive(Deserialize)]
struct WorkerCatalog {
    functions: Vec<FunctionSpec>,
    errors: Vec<LoadError>,
    #[serde(default)]
    warnings: Vec<LoadWarning>,
}

impl Catalog {
    /// Builds the catalog from a worker's `catalog` reply (a pool builds its
    /// own: [`crate::Pool::catalog`]); the functions come sorted by module,
    /// then name.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolpool::Catalog;
    ///
    /// let reply = json!({
    ///     "functions": [{
    ///         "name": "wait", "module": "utils", "file": "utils.py", "line": 15,
    ///         "description": "Wait for the given number of seconds.",
    ///         "parameters": {"type": "object", "properties": {"seconds": {"type": "number"}},
    ///                        "required": ["seconds"]},
    ///         "timeout": 120.0
    ///     }],
    ///     "errors": []
    /// });
    /// let catalog = Catalog::from_worker("functions".into(), reply)?;
    /// assert_eq!(catalog.own_timeout("wait"), Some(std::time::Duration::from_secs(120)));
    /// assert_eq!(catalog.to_openai()[0]["function"]["name"], "wait");
    /// assert_eq!(catalog.close_matches("waits"), ["wait"]);
    /// # Ok::<(), String>(())
    /// ```
    pub fn from_worker(functions_dir: PathBuf, reply: Value) -> Result<Catalog, String> {
        let WorkerCatalog {
            mut functions,
            errors,
            warnings,
        } = serde_json::from_value(reply).map_err(|e| format!("malformed catalog reply: {e}"))?;
        for w in &warnings {
            tracing::warn!(module = %w.module, "{}", w.warning);
        }
        // Sorted here too, so the order never depends on the worker.
        functions.sort_by(|a, b| (&a.module, &a.name).cmp(&(&b.module, &b.name)));
        Ok(Catalog {
            functions_dir,
            functions,
            errors,
            warnings,
        })
    }

    /// The function called `name`, if the catalog has it.
    pub fn get(&self, name: &str) -> Option<&FunctionSpec> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// The timeout function `name` gives itself, if it does.
    pub fn own_timeout(&self, name: &str) -> Option<std::time::Duration> {
        let seconds = self.get(name)?.timeout?;
        std::time::Duration::try_from_secs_f64(seconds).ok()
    }

    /// The grace after its timeout function `name` gives itself, if it does.
    pub fn own_timeout_grace(&self, name: &str) -> Option<std::time::Duration> {
        let seconds = self.get(name)?.timeout_grace?;
        std::time::Duration::try_from_secs_f64(seconds).ok()
    }

    /// Functions grouped by module, modules sorted.
    pub fn modules(&self) -> BTreeMap<&str, Vec<&FunctionSpec>> {
        let mut modules: BTreeMap<&str, Vec<&FunctionSpec>> = BTreeMap::new();
        for f in &self.functions {
            modules.entry(f.module.as_str()).or_default().push(f);
        }
        modules
    }

    /// The import error of a module, if it failed to load.
    pub fn import_errors(&self) -> impl Iterator<Item = &LoadError> {
        self.errors.iter()
    }

    /// Function names close to `name`, best first (at most three).
    pub fn close_matches(&self, name: &str) -> Vec<&str> {
        close_matches(name, self.functions.iter().map(|f| f.name.as_str()))
    }

    /// `catalog --format json` (`warnings` only when there are some).
    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "functions_dir": self.functions_dir,
            "functions": self.functions,
            "errors": self.errors,
        });
        if !self.warnings.is_empty() {
            value["warnings"] = json!(self.warnings);
        }
        value
    }

    /// `catalog --format openai`.
    pub fn to_openai(&self) -> Value {
        Value::Array(self.functions.iter().map(openai_tool).collect())
    }

    /// `list`: every `module:All` first, then every `module:function`.
    pub fn list_options(&self) -> Vec<ListOption> {
        let modules = self.modules();
        let mut options = Vec::with_capacity(modules.len() + self.functions.len());
        for (module, functions) in &modules {
            let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
            let file = functions.first().map(|f| f.file.as_str()).unwrap_or("");
            let noun = if names.len() == 1 {
                "function"
            } else {
                "functions"
            };
            options.push(ListOption {
                label: format!("{module}:All"),
                value: format!("{module}:All"),
                description: format!(
                    "Load all {} {noun} from {file} ({})",
                    names.len(),
                    names.join(", ")
                ),
            });
        }
        for (module, functions) in &modules {
            for f in functions {
                options.push(ListOption {
                    label: format!("{module}:{}", f.name),
                    value: f.name.clone(),
                    description: f.description.clone(),
                });
            }
        }
        options
    }

    /// `catalog --format table`: one row a function, then the load errors.
    pub fn to_table(&self) -> String {
        self.to_table_within(None)
    }

    /// The table fitted to `width` columns when given (a terminal's width):
    /// parameter lists are cut with `…`, descriptions wrapped (at most three
    /// lines), load errors wrapped. `None`: one line a tool, descriptions cut
    /// at 70 characters.
    pub fn to_table_within(&self, width: Option<usize>) -> String {
        let mut rows: Vec<[String; 4]> = self
            .functions
            .iter()
            .map(|f| {
                [
                    f.module.clone(),
                    f.name.clone(),
                    parameter_summary(&f.parameters),
                    f.description.clone(),
                ]
            })
            .collect();
        let header = ["MODULE", "FUNCTION", "PARAMETERS", "DESCRIPTION"];
        let column_widths = |rows: &[[String; 4]]| {
            let mut widths = header.map(|h| h.chars().count());
            for row in rows {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = (*w).max(cell.chars().count());
                }
            }
            widths
        };
        if let Some(width) = width {
            // Two spaces between columns. What the module and function
            // columns leave is shared: the parameter list gets up to two
            // fifths of it, cut with `…`; the description the rest, wrapped
            // over up to three lines (the last cut with `…`).
            let widths = column_widths(&rows);
            let left = width.saturating_sub(widths[0] + widths[1] + 6);
            let parameters = widths[2].min((left * 2 / 5).max(MIN_CUT_COLUMN));
            let description = left.saturating_sub(parameters).max(MIN_CUT_COLUMN);
            let mut wrapped = Vec::with_capacity(rows.len());
            for [module, function, params, text] in rows {
                let mut pieces = wrap(&text, description);
                if pieces.len() > MAX_DESCRIPTION_LINES {
                    let rest = pieces.split_off(MAX_DESCRIPTION_LINES - 1).join(" ");
                    pieces.push(truncate_chars(&rest, description));
                }
                let mut pieces = pieces.into_iter();
                let first = pieces.next().unwrap_or_default();
                wrapped.push([module, function, truncate_chars(&params, parameters), first]);
                for piece in pieces {
                    wrapped.push([String::new(), String::new(), String::new(), piece]);
                }
            }
            rows = wrapped;
        } else {
            for row in &mut rows {
                row[3] = truncate_chars(&row[3], 70);
            }
        }
        let widths = column_widths(&rows);
        let mut out = String::new();
        let mut push_row = |cells: [&str; 4]| {
            let line: Vec<String> = cells
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        };
        push_row(header);
        for row in &rows {
            push_row([&row[0], &row[1], &row[2], &row[3]]);
        }
        if !self.errors.is_empty() {
            out.push_str("\nload errors:\n");
            for e in &self.errors {
                let line = format!("{} ({}): {}", e.module, e.file, e.error);
                match width {
                    Some(width) => {
                        for piece in wrap(&line, width.saturating_sub(2).max(MIN_CUT_COLUMN)) {
                            out.push_str(&format!("  {piece}\n"));
                        }
                    }
                    None => out.push_str(&format!("  {line}\n")),
                }
            }
        }
        out
    }
}

/// The narrowest a cut table column gets, whatever the terminal's width.
const MIN_CUT_COLUMN: usize = 12;
/// Lines a description may take in a table cut to a terminal's width.
const MAX_DESCRIPTION_LINES: usize = 3;

/// `text` in lines of at most `width` characters, broken at spaces where
/// there are any (a longer word is split).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        let line_len = line.chars().count();
        if line_len > 0 && line_len + 1 + word.len() <= width {
            line.push(' ');
            line.extend(word.iter());
            continue;
        }
        if line_len > 0 {
            lines.push(std::mem::take(&mut line));
        }
        while word.len() > width {
            let rest = word.split_off(width);
            lines.push(word.into_iter().collect());
            word = rest;
        }
        line = word.into_iter().collect();
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// An OpenAI `tools` entry for a name, description and schema.
pub(crate) fn openai_tool(f: &FunctionSpec) -> Value {
    json!({"type": "function", "function": {
        "name": f.name, "description": f.description, "parameters": f.parameters}})
}

/// `a, b?, c?`: parameter names, optional ones marked.
fn parameter_summary(parameters: &Value) -> String {
    let required: Vec<&str> = parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    parameters["properties"]
        .as_object()
        .map(|props| {
            props
                .keys()
                .map(|k| {
                    if required.contains(&k.as_str()) {
                        k.clone()
                    } else {
                        format!("{k}?")
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{}…", cut.trim_end())
    }
}

/// Candidates whose similarity to `name` (1 − edit distance / longer length)
/// is at least 0.6, best first, at most three — the same cut-off as Python's `difflib.get_close_matches`.
pub(crate) fn close_matches<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Vec<&'a str> {
    let mut scored: Vec<(f64, &str)> = candidates
        .map(|c| (strsim::normalized_levenshtein(name, c), c))
        .filter(|(score, _)| *score >= 0.6)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests;
