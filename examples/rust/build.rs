// Links libdilattn from the meson build directory (DILATTN_LIB_DIR, default ../../build/lib).
fn main() {
    let dir = std::env::var("DILATTN_LIB_DIR").unwrap_or_else(|_| "../../build/lib".to_string());
    let dir = std::fs::canonicalize(&dir).expect("build dilattn first: meson setup build && meson compile -C build");
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=dilattn");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    println!("cargo:rerun-if-env-changed=DILATTN_LIB_DIR");
}
