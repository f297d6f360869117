//! Black-box integration tests: the real binary over stdio.

mod support;

mod protocol;
mod provider;
