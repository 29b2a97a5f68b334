//! Finds libdilattn: DILATTN_LIB_DIR (a directory holding libdilattn.so, e.g. a meson build's
//! lib/), else `pkg-config --variable=libdir dilattn`. The directory is passed on to crates
//! that depend on this one as DEP_DILATTN_LIB_DIR (for their rpath), and set as the rpath of
//! this crate's own tests.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn lib_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = env::var("DILATTN_LIB_DIR") {
        return PathBuf::from(&dir)
            .canonicalize()
            .map_err(|e| format!("DILATTN_LIB_DIR={dir}: {e}"));
    }
    let out = Command::new("pkg-config")
        .args(["--variable=libdir", "dilattn"])
        .output()
        .map_err(|e| format!("pkg-config could not run: {e}"))?;
    if !out.status.success() {
        return Err("pkg-config does not know dilattn".to_string());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn main() {
    println!("cargo:rerun-if-env-changed=DILATTN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dir = lib_dir().unwrap_or_else(|why| {
        panic!(
            "dilattn-sys: libdilattn not found ({why}). Build it (meson setup build && meson \
             compile -C build) and set DILATTN_LIB_DIR=<build>/lib, or install it for pkg-config."
        )
    });
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=dilattn");
    println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
}
