//! What the HTTP listeners share (`serve --http`'s MCP endpoint and
//! `serve --metrics`): the handling of a connection and the health probes.

pub(crate) mod conn;
pub(crate) mod health;
