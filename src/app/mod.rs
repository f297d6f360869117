//! The process: arguments (`cli`), start-up (`setup`), print mode (`headless`) and the subcommands.

pub(crate) mod cli;
pub(crate) mod headless;
pub(crate) mod setup;
pub(crate) mod subcommands;
