//! Every way a call and a worker end, as types, in one place: how one
//! attempt on a worker ended as its actor reports it ([`CallOutcome`], with
//! what it left behind, [`LeftBehind`]), how a worker ended
//! ([`Termination`]), and how the whole call ended ([`Ending`], or a
//! [`Refusal`] when it reached no worker), with the one function that turns
//! an ending into what the caller gets: [`Ending::into_result`].
//!
//! The worker (`crate::worker`) makes `CallOutcome`s and `Termination`s;
//! the pool (`crate::pool`) makes the `Ending`; every front end shows its
//! text as it is. Nothing here depends on the worker or the pool.

mod attempt;
mod ending;
mod termination;

pub(crate) use self::attempt::{CallOutcome, CallTime, Grace, LeftBehind};
pub(crate) use self::ending::{Ending, Refusal};
pub(crate) use self::termination::{describe_exit, Termination};
