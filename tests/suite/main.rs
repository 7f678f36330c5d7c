//! The integration tests, as one binary (one link of the crate, not one per
//! file): each module is one concern, run as `cargo test --test suite`,
//! one module as `cargo test --test suite -- <module>::`.

mod common;
mod mcp_support;

mod arguments;
mod cli;
mod concurrency;
mod context_attachments;
mod context_original_convention;
mod context_packages;
mod context_prompts;
mod context_reports;
mod dropin;
mod hostile_leftovers;
mod hostile_tools;
mod hostile_workers;
mod human_wait;
mod import_hazards;
mod isolation;
mod layering;
mod limits;
mod mcp_elicitation;
mod mcp_node;
mod mcp_python;
mod mcp_soak;
mod mcp_stdio;
mod mcp_stdio_input;
mod mcp_traces;
mod mcpscore;
mod metrics;
mod operators;
mod output_protection;
mod package_installs;
mod pool_sizing;
mod progress_heartbeat;
mod python_api;
mod python_shim;
mod recycling;
mod reload;
mod results;
mod sandbox;
mod sessions;
mod shutdown;
mod soak;
mod startup_failures;
mod subreaper;
mod supervisor_death;
mod template;
mod timeout_grace;
mod timeouts;
mod tool_settings;
mod wheel;
mod worker_death;
mod worker_env;
mod workflows;
