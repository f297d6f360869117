//! Release builds for x86_64 glibc link the functions the start-up path runs next to each other
//! (`scripts/startup.order`, written by `make startup-order`), so `initialize` + `session/new` fault in
//! a few 64 KiB windows of the binary's text instead of most of them: about 1.5 MiB less peak
//! RSS. Only where the linker is lld (Rust's default for this target from 1.90) and no other
//! linker is configured; elsewhere the build is as before. A name the file has and the binary
//! does not is skipped, so a stale file costs RSS, never a build.
//!
//! Release builds for x86_64 musl (the static binary: `make static`, `make dist`) link with
//! Rust's bundled lld and fold identical functions (`--icf=all`: 26 KB of the static binary;
//! Rust marks functions `unnamed_addr`, and lld folds no read-only data without
//! `--ignore-data-address-equality`). Only when no other linker is configured and the
//! toolchain ships `gcc-ld/ld.lld`; elsewhere the build is as before.

// A build script talks to cargo on stdout.
#![allow(clippy::print_stdout)]

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=scripts/startup.order");
    println!("cargo:rerun-if-env-changed=PRIME_AGENT_NO_STARTUP_ORDER");
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("TARGET") == "x86_64-unknown-linux-musl" {
        fold_identical_code(&var("HOST"));
        return;
    }
    if var("TARGET") != "x86_64-unknown-linux-gnu"
        || var("PROFILE") != "release"
        || env::var_os("PRIME_AGENT_NO_STARTUP_ORDER").is_some()
        // Another linker (mold, bfd through a `linker =` setting) may not know the option.
        || env::var_os("RUSTC_LINKER").is_some()
        || var("CARGO_ENCODED_RUSTFLAGS").contains("link")
        || !rustc_links_with_lld()
    {
        return;
    }
    let order = Path::new(&var("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join("startup.order");
    if !order.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=prime-agent=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bin=prime-agent=-Wl,--no-warn-symbol-ordering");
}

/// The static binary's link through the toolchain's lld with identical code folding.
fn fold_identical_code(host: &str) {
    if env::var("PROFILE").as_deref() != Ok("release")
        || env::var_os("RUSTC_LINKER").is_some()
        || env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("link"))
    {
        return;
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let gcc_ld = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin/gcc-ld");
    if sysroot.is_empty() || !gcc_ld.join("ld.lld").is_file() {
        return;
    }
    for arg in [
        format!("-B{}", gcc_ld.display()),
        "-fuse-ld=lld".into(),
        "-Wl,--icf=all".into(),
    ] {
        println!("cargo:rustc-link-arg-bin=prime-agent={arg}");
    }
}

/// Rust 1.90 and later link x86_64-unknown-linux-gnu with its bundled lld.
fn rustc_links_with_lld() -> bool {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let minor = text
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
