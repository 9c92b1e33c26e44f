//! `scripts/setup.sh --check` detects each prerequisite by what the build really loads: a
//! `libclang` that clang-sys would dlopen, not a neighbour such as `libclang-cpp.so.14`
//! (which Debian ships without libclang-dev, and which made a fresh machine's build fail).

use std::path::Path;
use std::process::Command;

fn repo_path(relative: &str) -> std::path::PathBuf {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    Path::new(&root).join(relative)
}

/// The libclang line of `setup.sh --check --root ROOT` for a fake root holding `files`.
fn libclang_line(files: &[&str]) -> String {
    let root = tempfile::tempdir().expect("tempdir");
    for f in files {
        let path = root.path().join(f.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, b"\x7fELF").expect("write");
    }
    let out = Command::new("bash")
        .arg(repo_path("scripts/setup.sh"))
        .args(["--check", "--root"])
        .arg(root.path())
        .env_remove("LIBCLANG_PATH")
        .output()
        .expect("run setup.sh");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "a fake root without compilers must report something missing:\n{text}");
    text.lines()
        .find(|l| l.contains(" libclang "))
        .unwrap_or_else(|| panic!("no libclang line in:\n{text}"))
        .to_string()
}

#[test]
fn a_root_with_only_libclang_cpp_is_reported_as_missing_libclang() {
    let line =
        libclang_line(&["/usr/lib/x86_64-linux-gnu/libclang-cpp.so.14", "/usr/lib/llvm-14/lib/libclang-cpp.so.14"]);
    assert!(line.contains("missing"), "{line}");
    assert!(line.contains("libclang-dev"), "the line names the package to install: {line}");
}

#[test]
fn a_root_with_a_versioned_libclang_is_reported_as_present_with_its_path() {
    let line = libclang_line(&["/usr/lib/x86_64-linux-gnu/libclang-cpp.so.14", "/usr/lib/llvm-14/lib/libclang.so.1"]);
    assert!(line.contains("found"), "{line}");
    assert!(line.contains("/usr/lib/llvm-14/lib/libclang.so.1"), "the line says how it was found: {line}");
}

#[test]
fn a_root_with_a_plain_libclang_so_is_reported_as_present() {
    let line = libclang_line(&["/usr/lib/libclang.so"]);
    assert!(line.contains("found") && line.contains("/usr/lib/libclang.so"), "{line}");
}

#[test]
fn an_empty_root_reports_every_prerequisite_missing() {
    let root = tempfile::tempdir().expect("tempdir");
    let out = Command::new("bash")
        .arg(repo_path("scripts/setup.sh"))
        .args(["--check", "--root"])
        .arg(root.path())
        .output()
        .expect("run setup.sh");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for name in ["libclang", "C compiler", "OpenSSL", "zlib", "java", "maven"] {
        assert!(
            text.lines().any(|l| l.contains("missing") && l.contains(name)),
            "{name} not reported missing:\n{text}"
        );
    }
}
