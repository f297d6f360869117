//! Release packaging: the archive layout `scripts/dist.sh` produces, `scripts/install.sh` on
//! it, and the ACP registry entry `scripts/registry_entry.py` generates for those archives. The static cross builds
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

/// The license `Cargo.toml` declares is the one in `LICENSE`.
#[test]
fn the_license_file_is_the_one_cargo_toml_declares() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(manifest.lines().any(|l| l == "license = \"MIT\""));
    let license = std::fs::read_to_string(root().join("LICENSE")).unwrap();
    assert!(
        license.starts_with("MIT License\n\nCopyright (c) "),
        "{license}"
    );
    assert!(license.contains("the prime-agent developers"));
}

/// An archive as `dist.sh` lays it out whose `bin/prime-agent` (and its hard link
/// `prime-agent`) is `binary` (bytes), with its `.sha256`, in `dir`.
fn archive_of(dir: &Path, target: &str, binary: &[u8]) -> PathBuf {
    let stage = dir.join(format!("stage-{target}"));
    std::fs::create_dir_all(stage.join("bin")).unwrap();
    let exe = stage.join("bin/prime-agent");
    std::fs::write(&exe, binary).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = std::fs::remove_file(stage.join("prime-agent"));
    std::fs::hard_link(&exe, stage.join("prime-agent")).unwrap();
    let name = format!("prime-agent-{VERSION}-{target}.tar.gz");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(dir.join(&name))
        .arg("-C")
        .arg(&stage)
        .args(["bin", "prime-agent"])
        .status()
        .unwrap();
    assert!(tar.success());
    let sum = Command::new("sha256sum")
        .arg(&name)
        .current_dir(dir)
        .output()
        .unwrap();
    std::fs::write(dir.join(format!("{name}.sha256")), sum.stdout).unwrap();
    dir.join(name)
}

/// The first 64 bytes of an ELF executable for `machine` (`e_machine`): what another
/// architecture's binary looks like to this kernel (exec fails with ENOEXEC).
fn elf_header(machine: u16) -> Vec<u8> {
    let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    h.resize(16, 0);
    h.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    h.extend_from_slice(&machine.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    h.resize(64, 0);
    h
}

#[test]
fn install_sh_refuses_a_binary_that_does_not_run_here_and_keeps_the_old_install() {
    let dir = TempDir::new("install-arch");
    let prefix = dir.path().join("prefix");
    let good = package(dir.path(), "x86_64-unknown-linux-musl");
    let out = install(&[Path::new("--prefix"), &prefix, &good]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let installed = prefix.join("bin/prime-agent");
    let before = std::fs::read(&installed).unwrap();

    // Another architecture's ELF (a machine this host is not), then a file that is no
    // executable at all: a shell that gets ENOEXEC may run it as a script.
    let other = if cfg!(target_arch = "aarch64") {
        62 // x86-64
    } else {
        183 // AArch64
    };
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    for (target, binary) in [
        ("other-unknown-linux-musl", elf_header(other)),
        (
            "script-unknown-linux-musl",
            b"echo prime-agent-ish; exit 0\n".to_vec(),
        ),
    ] {
        let archive = archive_of(&bad, target, &binary);
        let out = install(&[Path::new("--prefix"), &prefix, &archive]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{target}: {err}");
        assert!(
            err.contains("does not run on this machine") && err.contains("nothing was replaced"),
            "{target}: {err}"
        );
        // The old install is untouched, still runs, and no temporary file is left.
        assert_eq!(files_under(&prefix), ["bin/prime-agent"], "{target}");
        assert!(std::fs::read(&installed).unwrap() == before, "{target}");
        let v = Command::new(&installed).arg("--version").output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&v.stdout).trim(),
            format!("prime-agent {VERSION}")
        );
    }
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
fn dist_archives_hold_the_binary_license_and_readme_and_a_sha256_in_sha256sum_format() {
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
    assert_eq!(
        names,
        [
            "LICENSE",
            "README.md",
            "bin/",
            "bin/prime-agent",
            "prime-agent"
        ]
    );
    // `prime-agent` at the top (the registry's `cmd`) is a hard link to bin/prime-agent: the
    // binary is in the archive once.
    let verbose = Command::new("tar")
        .arg("-tvzf")
        .arg(&archive)
        .output()
        .unwrap();
    let verbose = String::from_utf8_lossy(&verbose.stdout);
    assert!(
        verbose.contains("prime-agent link to bin/prime-agent"),
        "{verbose}"
    );
    let license = Command::new("tar")
        .arg("-xzOf")
        .arg(&archive)
        .arg("LICENSE")
        .output()
        .unwrap();
    assert_eq!(
        license.stdout,
        std::fs::read(root().join("LICENSE")).unwrap()
    );
    // The installer is served beside the archives (docs/install.md fetches $BASE/install.sh).
    assert_eq!(
        std::fs::read(dir.path().join("install.sh")).unwrap(),
        std::fs::read(root().join("scripts/install.sh")).unwrap()
    );
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

/// The registry platforms `Cargo.toml` lists and their Rust targets.
const REGISTRY_PLATFORMS: [(&str, &str); 2] = [
    ("linux-aarch64", "aarch64-unknown-linux-musl"),
    ("linux-x86_64", "x86_64-unknown-linux-musl"),
];
/// A repository for the generator's tests: example.com is reserved (RFC 2606), no one's.
const TEST_REPOSITORY: &str = "https://example.com/prime-agent-rs";

/// Runs scripts/registry_entry.py with `manifest`, `dist` and `out`, and `extra` arguments.
fn registry_entry(manifest: &Path, dist: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new("python3")
        .arg(root().join("scripts/registry_entry.py"))
        .arg("--manifest")
        .arg(manifest)
        .arg("--dist")
        .arg(dist)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// `Cargo.toml` as it is, plus a `repository` and a `release-url`: a copy in `dir`.
fn manifest_with_repository(dir: &Path) -> PathBuf {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("\nrepository ="),
        "Cargo.toml sets a repository now"
    );
    let manifest = manifest
        .replacen(
            "license = \"MIT\"\n",
            &format!("license = \"MIT\"\nrepository = \"{TEST_REPOSITORY}\"\n"),
            1,
        )
        .replacen(
            "[package.metadata.acp-registry]\n",
            "[package.metadata.acp-registry]\nrelease-url = \"{repository}/releases/download/v{version}\"\n",
            1,
        );
    let path = dir.join("Cargo.toml");
    std::fs::write(&path, manifest).unwrap();
    path
}

/// Every file under `dir` whose text names upstream's GitHub organisation.
fn naming_upstream(dir: &Path) -> Vec<String> {
    files_under(dir)
        .into_iter()
        .filter(|f| {
            std::fs::read(dir.join(f)).is_ok_and(|b| {
                String::from_utf8_lossy(&b)
                    .to_lowercase()
                    .contains("primeintellect-ai")
            })
        })
        .collect()
}

/// The entry `scripts/registry_entry.py` writes from `Cargo.toml` and the release archives
/// (packaged here from the test build, for both targets): valid against the registry's schema,
/// and passing the checks of the registry's build script (build_registry.py) and auth check
/// (verify_agents.py --auth-check) that run offline, except the one it fails (every OS family).
#[test]
fn the_generated_registry_entry_matches_the_registry_schema_and_the_archives() {
    let dir = TempDir::new("registry");
    let dist = dir.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    for (_, target) in REGISTRY_PLATFORMS {
        package(&dist, target);
    }
    let manifest = manifest_with_repository(dir.path());
    let out_root = dir.path().join("out");
    let out = registry_entry(&manifest, &dist, &out_root, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The id is not upstream's `prime-agent`, and names the entry's directory.
    assert_eq!(
        files_under(&out_root),
        ["prime-agent-rs/agent.json", "prime-agent-rs/icon.svg"]
    );
    let entry_dir = out_root.join("prime-agent-rs");
    let text = std::fs::read_to_string(entry_dir.join("agent.json")).unwrap();
    let entry: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(entry["id"], "prime-agent-rs");

    // The registry's own schema (agentclientprotocol/registry, agent.schema.json).
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("fixtures/acp-registry/agent.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&entry)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    // Everything else comes from Cargo.toml: ours, and no one else's.
    assert_eq!(entry["version"], VERSION);
    assert_eq!(entry["repository"], TEST_REPOSITORY);
    assert_eq!(
        entry["authors"],
        serde_json::json!(["the prime-agent developers"])
    );
    assert_eq!(entry["license"], "MIT");
    assert_eq!(entry["description"], env!("CARGO_PKG_DESCRIPTION"));
    assert_eq!(naming_upstream(&out_root), Vec::<String>::new());
    assert_eq!(
        naming_upstream(&root().join("packaging")),
        Vec::<String>::new()
    );

    // The build script: a semantic version that every archive URL carries (its own pattern,
    // `/download/v<version>/`), no /latest/, known platforms. Each URL names an archive we
    // have, whose checksum the generator checked against its .sha256 and printed.
    let binary = entry["distribution"]["binary"].as_object().unwrap();
    let platforms: Vec<&str> = binary.keys().map(String::as_str).collect();
    assert_eq!(platforms, REGISTRY_PLATFORMS.map(|(p, _)| p));
    for (platform, target) in REGISTRY_PLATFORMS {
        let name = format!("prime-agent-{VERSION}-{target}.tar.gz");
        let url = binary[platform]["archive"].as_str().unwrap();
        assert_eq!(
            url,
            format!("{TEST_REPOSITORY}/releases/download/v{VERSION}/{name}")
        );
        let sums = std::fs::read_to_string(dist.join(format!("{name}.sha256"))).unwrap();
        assert!(stdout.contains(&format!("  {}", sums.trim())), "{stdout}");
        assert_eq!(binary[platform]["cmd"], "./prime-agent");
    }

    // The auth check, on this machine's archive as it does it: unpack, run `cmd` with `args`
    // from the unpacked directory, send initialize; at least one auth method, of type
    // `agent` or `terminal` (a method without a type counts as `agent`).
    let machine = String::from_utf8(Command::new("uname").arg("-m").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    let host = binary[&format!("linux-{machine}")].clone();
    let extracted = dir.path().join("extracted");
    std::fs::create_dir_all(&extracted).unwrap();
    let archive = dist.join(
        host["archive"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap(),
    );
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&extracted)
        .status()
        .unwrap();
    assert!(untar.success());
    let args: Vec<&str> = host["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["--mode", "acp", "--multi-session"]);
    let agent_dir = TempDir::new("registry-args");
    let mut agent = Command::new(extracted.join(host["cmd"].as_str().unwrap()))
        .args(&args)
        .current_dir(&extracted)
        .env("PRIME_AGENT_CODING_AGENT_DIR", agent_dir.path())
        .env("HOME", agent_dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    let mut stdin = agent.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1,"clientCapabilities":{{}}}}}}"#
    )
    .unwrap();
    drop(stdin);
    let mut line = String::new();
    std::io::BufReader::new(agent.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(agent.wait().unwrap().success());
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["result"]["protocolVersion"], 1, "{line}");
    // The entry's version is the one the agent reports.
    assert_eq!(r["result"]["agentInfo"]["version"], VERSION, "{line}");
    let methods = r["result"]["authMethods"].as_array().unwrap();
    assert!(
        methods.iter().any(|m| {
            let t = m["type"].as_str().unwrap_or("agent");
            t == "agent" || t == "terminal"
        }),
        "{line}"
    );

    // What the build script requires and this entry does not have: builds for every OS
    // family (darwin and windows too). Only the targets that have been run are listed.
    assert!(!platforms
        .iter()
        .any(|p| p.starts_with("darwin") || p.starts_with("windows")));

    // The icon rules: square 16x16, monochrome through currentColor.
    let icon = std::fs::read_to_string(entry_dir.join("icon.svg")).unwrap();
    assert_eq!(entry["icon"], "./icon.svg");
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

/// With no `repository` in Cargo.toml (as today) the generator names none: it says why and
/// exits 1 (0 with --if-repository, as `make dist` runs it), writing nothing. A checksum that
/// does not match its archive, or a binary of another version, is refused too.
#[test]
fn the_registry_entry_is_refused_without_a_repository_or_with_a_bad_archive() {
    let dir = TempDir::new("registry-refused");
    let dist = dir.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    for (_, target) in REGISTRY_PLATFORMS {
        package(&dist, target);
    }
    let out_root = dir.path().join("out");
    for (extra, ok) in [(&[][..], false), (&["--if-repository"][..], true)] {
        let out = registry_entry(&root().join("Cargo.toml"), &dist, &out_root, extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), ok, "{extra:?}: {err}");
        assert!(
            err.contains("sets no [package] repository")
                && err.contains("no public repository")
                && err.contains("No ACP registry entry is written"),
            "{err}"
        );
        assert!(!out_root.exists());
    }

    // The registry check's test-only URL (`--check-loopback`) is refused off the loopback
    // interface; on it, the entry names only the loopback server, under /test-only/.
    for url in [
        "https://example.com",
        "http://10.0.0.1:8080",
        "http://127.0.0.1:9/x",
    ] {
        let out = registry_entry(
            &root().join("Cargo.toml"),
            &dist,
            &out_root,
            &["--check-loopback", url],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("loopback address"),
            "{url}: {err}"
        );
        assert!(!out_root.exists());
    }
    let out = registry_entry(
        &root().join("Cargo.toml"),
        &dist,
        &out_root,
        &["--check-loopback", "http://127.0.0.1:9"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entry = std::fs::read_to_string(out_root.join("prime-agent-rs/agent.json")).unwrap();
    let entry: Value = serde_json::from_str(&entry).unwrap();
    assert_eq!(
        entry["repository"],
        "http://127.0.0.1:9/test-only/prime-agent-rs"
    );
    for (platform, target) in REGISTRY_PLATFORMS {
        assert_eq!(
            entry["distribution"]["binary"][platform]["archive"],
            format!("http://127.0.0.1:9/test-only/prime-agent-rs/releases/download/v{VERSION}/prime-agent-{VERSION}-{target}.tar.gz")
        );
    }
    std::fs::remove_dir_all(&out_root).unwrap();

    let manifest = manifest_with_repository(dir.path());
    let (_, target) = REGISTRY_PLATFORMS[0];
    let sums = dist.join(format!("prime-agent-{VERSION}-{target}.tar.gz.sha256"));
    let good = std::fs::read_to_string(&sums).unwrap();
    let flipped = if good.starts_with('0') { "1" } else { "0" };
    std::fs::write(&sums, format!("{flipped}{}", &good[1..])).unwrap();
    // A missing repository is the only refusal --if-repository lets through.
    let out = registry_entry(&manifest, &dist, &out_root, &["--if-repository"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("sha256"), "{err}");
    assert!(!out_root.exists());
    std::fs::write(&sums, good).unwrap();

    // This machine's archive holding a binary that reports another version.
    let machine = String::from_utf8(Command::new("uname").arg("-m").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    let other = b"#!/bin/sh\necho prime-agent 9.9.9\n";
    archive_of(&dist, &format!("{machine}-unknown-linux-musl"), other);
    let out = registry_entry(&manifest, &dist, &out_root, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("'prime-agent 9.9.9'"),
        "{err}"
    );
    assert!(!out_root.exists());
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
    let darwin = "darwin-check: 2 passed, 0 failed\n";
    let registry = "registry-check: 14 passed, 0 failed\n";
    let cases: &[(&[(&str, &str)], &str)] = &[
        // A fresh machine: no smoke test ran, so none wrote a log.
        (
            &[("test.log", cargo)],
            "total: 8 passed, 1 failed\nskipped: static-smoke dist-smoke registry-check darwin-check",
        ),
        (
            &[("test.log", cargo), ("dist-smoke.log", dist)],
            "total: 10 passed, 1 failed\nskipped: static-smoke registry-check darwin-check (",
        ),
        (
            &[
                ("test.log", cargo),
                ("static-smoke.log", fixed),
                ("dist-smoke.log", dist),
                ("registry-check.log", registry),
            ],
            "total: 25 passed, 1 failed\nskipped: darwin-check",
        ),
        (
            &[
                ("test.log", cargo),
                ("static-smoke.log", fixed),
                ("dist-smoke.log", dist),
                ("registry-check.log", registry),
                ("darwin-check.log", darwin),
            ],
            "total: 27 passed, 1 failed\n",
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
        ("registry-check.log", registry),
        ("darwin-check.log", darwin),
    ]);
    assert!(!out.contains("skipped"), "{out}");
}

/// The one line of `doc` that starts with `prefix` (a documented command), without its
/// trailing `# comment`.
fn documented_command(doc: &str, prefix: &str) -> String {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(
        lines.len(),
        1,
        "{doc}: lines starting {prefix:?}: {lines:?}"
    );
    lines[0].split("   #").next().unwrap().trim().to_owned()
}

/// Runs `command` with `sh -c` in `cwd`, with `HOME` and extra `env`; panics unless it succeeds.
fn run_documented(command: &str, cwd: &Path, home: &Path, env: &[(&str, String)]) {
    let out = Command::new("sh")
        .args(["-c", command])
        .current_dir(cwd)
        .env("HOME", home)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_runs(installed: &Path) {
    let v = Command::new(installed).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("prime-agent {VERSION}"),
        "{}",
        installed.display()
    );
}

/// README.md's install command, run as written from a checkout after `make dist` (the archive
/// is in `dist/`), and docs/install.md's sandbox recipe against a local HTTP server serving
/// `dist/` (only the root-owned `/opt` prefix is swapped for a temporary one).
#[test]
fn the_documented_install_commands_work_as_written() {
    let dir = TempDir::new("install-docs");
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("scripts")).unwrap();
    std::fs::copy(
        root().join("scripts/install.sh"),
        checkout.join("scripts/install.sh"),
    )
    .unwrap();
    let dist = checkout.join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    // The archives are named for their target; the binary inside is this host's test build.
    let machine = String::from_utf8(Command::new("uname").arg("-m").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    for arch in ["x86_64".to_owned(), machine] {
        package(&dist, &format!("{arch}-unknown-linux-musl"));
    }

    let home = dir.path().join("home");
    let readme = documented_command("README.md", "scripts/install.sh ");
    run_documented(&readme, &checkout, &home, &[]);
    assert_runs(&home.join(".local/bin/prime-agent"));

    if Command::new("curl").arg("--version").output().is_err() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: packaging::the_documented_install_commands (the curl recipe): no curl"
        );
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = KillOnDrop(
        Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1"])
            .arg(port.to_string())
            .current_dir(&dist)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "http.server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let sandbox = dir.path().join("sandbox");
    std::fs::create_dir_all(&sandbox).unwrap();
    let opt = dir.path().join("opt/prime-agent");
    let recipe = documented_command("docs/install.md", "curl ")
        .replace("/opt/prime-agent", &opt.display().to_string());
    run_documented(
        &recipe,
        &sandbox,
        &home,
        &[("BASE", format!("http://127.0.0.1:{port}"))],
    );
    assert_runs(&opt.join("bin/prime-agent"));
}

/// A child process killed and reaped when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
