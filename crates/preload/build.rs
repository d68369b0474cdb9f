//! Builds the shim, `libstripefs_preload.so`, from shim/shim.c with the C compiler
//! (`$CC`, else `cc`), and puts it beside the other artifacts of the profile
//! (target/release/libstripefs_preload.so), where `stripefs run` and users find it. A
//! C shim, because every process that preloads a Rust library also loads the Rust
//! runtime and libgcc_s (see the shim's header).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("shim/shim.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let so = out.join("libstripefs_preload.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-O2",
            "-g",
            "-std=gnu11",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            "-U_FORTIFY_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            "-o",
        ])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {}", src.display());
    // OUT_DIR is target/<profile>/build/<package>-<hash>/out.
    let profile_dir = out
        .ancestors()
        .nth(3)
        .expect("OUT_DIR inside target/<profile>/build");
    let dest = profile_dir.join("libstripefs_preload.so");
    // Replaced by a rename, so that a running process keeps the old one mapped.
    let tmp = profile_dir.join(".libstripefs_preload.so.new");
    std::fs::copy(&so, &tmp).expect("copying the shim");
    std::fs::rename(&tmp, &dest).expect("placing the shim");
}
