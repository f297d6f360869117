//! Black-box integration tests: the real binary over stdio.

mod support;

mod kernel;
mod protocol;
