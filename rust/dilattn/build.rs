//! dilattn-sys found libdilattn (DEP_DILATTN_LIB_DIR): put it on the rpath of this crate's tests
//! so they run without LD_LIBRARY_PATH.
fn main() {
    if let Ok(dir) = std::env::var("DEP_DILATTN_LIB_DIR") {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
    }
}
