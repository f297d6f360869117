//! Release packaging: the archive layout `scripts/dist.sh` produces, `scripts/install.sh` on
//! it, and the ACP registry entry that points at those archives. The static cross builds
//! themselves are checked by `make dist-smoke` (scripts/dist_smoke.py), which `make test` runs
//! when the cross toolchain is installed; these tests need no toolchain and package the test
//! build of the binary instead.

use crate::support::{bin, root, TempDir};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Packages the test binary as dist.sh packages a release one; returns the archive's path.
fn package(dir: &Path, target: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("scripts/dist.sh"))
        .args(["package", target, bin()])
        .arg(dir)
        .arg(VERSION)
        .env("DIST_GZIP_LEVEL", "-1") // the debug binary is large; speed over size here
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dist.sh package: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = dir.join(format!("prime-agent-{VERSION}-{target}.tar.gz"));
    assert!(archive.is_file(), "no {}", archive.display());
    archive
}

fn install(args: &[&Path]) -> Output {
    Command::new("sh")
        .arg(root().join("scripts/install.sh"))
        .args(args)
        .output()
        .unwrap()
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn dist_archives_hold_bin_prime_agent_and_a_sha256_in_sha256sum_format() {
    let dir = TempDir::new("dist");
    let archive = package(dir.path(), "x86_64-unknown-linux-musl");
    let list = Command::new("tar")
        .arg("-tzf")
        .arg(&archive)
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    assert_eq!(names, ["README.md", "bin/", "bin/prime-agent"]);
    let check = Command::new("sha256sum")
        .arg("-c")
        .arg(archive.with_extension("gz.sha256"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[test]
fn install_sh_installs_a_local_archive_into_an_empty_prefix() {
    let dir = TempDir::new("install");
    let archive = package(dir.path(), "x86_64-unknown-linux-musl");
    let prefix = dir.path().join("prefix");
    let out = install(&[Path::new("--prefix"), &prefix, &archive]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("prime-agent {VERSION}")),
        "{stdout}"
    );
    // Only the binary, nothing left over from the atomic replace.
    assert_eq!(files_under(&prefix), ["bin/prime-agent"]);
    let installed = prefix.join("bin/prime-agent");
    assert_eq!(
        std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert!(std::fs::read(&installed).unwrap() == std::fs::read(bin()).unwrap());
    let v = Command::new(&installed).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("prime-agent {VERSION}")
    );

    // A second install over the first replaces it in place.
    let again = install(&[Path::new("--prefix"), &prefix, &archive]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(files_under(&prefix), ["bin/prime-agent"]);
}

#[test]
fn install_sh_refuses_an_archive_without_a_matching_sha256() {
    let dir = TempDir::new("install-bad");
    let archive = package(dir.path(), "x86_64-unknown-linux-musl");
    let sums = archive.with_extension("gz.sha256");
    let prefix = dir.path().join("prefix");

    let good = std::fs::read_to_string(&sums).unwrap();
    let flipped = if good.starts_with('0') { "1" } else { "0" };
    std::fs::write(&sums, format!("{flipped}{}", &good[1..])).unwrap();
    let out = install(&[Path::new("--prefix"), &prefix, &archive]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("sha256 mismatch"), "{err}");
    assert!(!prefix.join("bin/prime-agent").exists());

    std::fs::remove_file(&sums).unwrap();
    let out = install(&[Path::new("--prefix"), &prefix, &archive]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no checksum"), "{err}");
    assert!(!prefix.join("bin/prime-agent").exists());

    // --sha256 given on the command line is enough.
    let sha = good.split_whitespace().next().unwrap();
    let out = install(&[
        Path::new("--prefix"),
        &prefix,
        Path::new("--sha256"),
        Path::new(sha),
        &archive,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(prefix.join("bin/prime-agent").is_file());
}

#[test]
fn install_sh_carries_the_crates_version() {
    let script = std::fs::read_to_string(root().join("scripts/install.sh")).unwrap();
    assert!(
        script.lines().any(|l| l == format!("VERSION={VERSION}")),
        "install.sh VERSION is stale"
    );
}

#[test]
fn the_acp_registry_entry_matches_the_registry_schema_and_our_archives() {
    let dir = root().join("packaging/acp-registry/prime-agent");
    let entry: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("agent.json")).unwrap()).unwrap();
    // The registry's own schema (agentclientprotocol/registry, agent.schema.json).
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("fixtures/schema/acp-registry-agent.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&entry)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    // The registry's build script: the id names the directory, the version is x.y.z and every
    // archive URL carries that version (no /latest/).
    assert_eq!(entry["id"], "prime-agent");
    assert_eq!(entry["version"], VERSION);
    let binary = entry["distribution"]["binary"].as_object().unwrap();
    let mut platforms: Vec<&str> = binary.keys().map(String::as_str).collect();
    platforms.sort();
    assert_eq!(platforms, ["linux-aarch64", "linux-x86_64"]);
    for (platform, target) in binary {
        let arch = platform.strip_prefix("linux-").unwrap();
        let url = target["archive"].as_str().unwrap();
        assert!(url.starts_with("https://"), "{url}");
        assert!(!url.contains("/latest/"), "{url}");
        let name = format!("/v{VERSION}/prime-agent-{VERSION}-{arch}-unknown-linux-musl.tar.gz");
        assert!(url.ends_with(&name), "{url} should end with {name}");
        // The path dist.sh puts the binary at, and the agent's ACP mode.
        assert_eq!(target["cmd"], "./bin/prime-agent");
        let args: Vec<&str> = target["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args, ["--mode", "acp", "--multi-session"]);
        // The arguments must be ones the agent accepts: it starts and answers initialize.
        let mut agent = std::process::Command::new(bin())
            .args(&args)
            .args(["--provider", "scripted", "--script"])
            .arg(root().join("fixtures/scripts/hello.jsonl"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::{BufRead, Write};
        let mut stdin = agent.stdin.take().unwrap();
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1}}}}"#
        )
        .unwrap();
        drop(stdin);
        let mut line = String::new();
        std::io::BufReader::new(agent.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let r: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(r["result"]["protocolVersion"], 1, "{line}");
        assert!(agent.wait().unwrap().success());
    }

    // The registry's icon rules: square 16x16, monochrome through currentColor.
    let icon = std::fs::read_to_string(dir.join(entry["icon"].as_str().unwrap())).unwrap();
    assert!(
        icon.contains(r#"width="16" height="16" viewBox="0 0 16 16""#),
        "{icon}"
    );
    for attr in ["fill=\"", "stroke=\""] {
        for value in icon.split(attr).skip(1) {
            let v = value.split('"').next().unwrap().to_lowercase();
            assert!(
                ["currentcolor", "none", "inherit"].contains(&v.as_str()),
                "{attr}{v}"
            );
        }
    }
    assert!(icon.contains("currentColor"));
}

/// Runs `scripts/test_summary.sh` over a log directory holding `logs` (name, text).
fn summary(logs: &[(&str, &str)]) -> (bool, String) {
    let dir = TempDir::new("summary");
    for (name, text) in logs {
        dir.write(name, text);
    }
    let out = Command::new("bash")
        .arg(root().join("scripts/test_summary.sh"))
        .arg(dir.path())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn the_make_test_summary_reads_only_the_logs_a_run_wrote_and_names_the_skipped_smokes() {
    let cargo = "test result: ok. 5 passed; 0 failed; 0 ignored\n\
                 test result: FAILED. 3 passed; 1 failed; 0 ignored\n";
    let dist = "dist-smoke: 2 passed, 0 failed\n";
    let fixed = "static-smoke: 1 passed, 0 failed\n";
    let cases: &[(&[(&str, &str)], &str)] = &[
        // A fresh machine: neither smoke test ran, so neither wrote a log.
        (
            &[("test.log", cargo)],
            "total: 8 passed, 1 failed\nskipped: static-smoke dist-smoke",
        ),
        (
            &[("test.log", cargo), ("dist-smoke.log", dist)],
            "total: 10 passed, 1 failed\nskipped: static-smoke (",
        ),
        (
            &[
                ("test.log", cargo),
                ("static-smoke.log", fixed),
                ("dist-smoke.log", dist),
            ],
            "total: 11 passed, 1 failed\n",
        ),
    ];
    for (logs, want) in cases {
        let (ok, out) = summary(logs);
        assert!(ok, "{logs:?}: {out}");
        assert!(out.starts_with(want), "{logs:?}: {out}");
    }
    let (_, out) = summary(&[
        ("test.log", cargo),
        ("static-smoke.log", fixed),
        ("dist-smoke.log", dist),
    ]);
    assert!(!out.contains("skipped"), "{out}");
}
