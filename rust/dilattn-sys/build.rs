//! Finds or builds libdilattn, in this order:
//! 1. DILATTN_LIB_DIR (a directory holding libdilattn.so, e.g. a meson build's lib/);
//! 2. `pkg-config --variable=libdir dilattn` (an installed library);
//! 3. with the `bundled` feature (a default one): compiles the library's C++ sources of this
//!    repository (lib/, cpu_ref/, cpu/, and the stubs a meson build without CUDA, the emulator,
//!    NCCL or MPI uses) with the host C++ compiler ($CXX, else c++) into a static archive in
//!    OUT_DIR, so a crate that depends on this one builds and runs with no environment variable.
//!
//! A found shared library's directory is passed on to dependent crates as DEP_DILATTN_LIB_DIR
//! (for their rpath) and set as the rpath of this crate's own tests. The bundled build is the
//! cpu and ref backends only (no CUDA, emu, NCCL or MPI), compiled like a meson release build
//! without -Dnative: the cpu backend's per-ISA files once per target, as cpu/meson.build does.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;

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
        return Err("DILATTN_LIB_DIR is not set and pkg-config does not know dilattn".to_string());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn main() {
    println!("cargo:rerun-if-env-changed=DILATTN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=CXX");
    match lib_dir() {
        Ok(dir) => {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=dylib=dilattn");
            println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", dir.display());
            println!("cargo:lib_dir={}", dir.display());
        }
        Err(why) if env::var_os("CARGO_FEATURE_BUNDLED").is_some() => {
            println!("cargo:warning=dilattn-sys: {why}; building the bundled library");
            if let Err(e) = bundled::build() {
                panic!("dilattn-sys: the bundled build of libdilattn failed: {e}");
            }
        }
        Err(why) => panic!(
            "dilattn-sys: libdilattn not found ({why}) and the `bundled` feature is off. Build \
             it (meson setup build && meson compile -C build) and set DILATTN_LIB_DIR=<build>/lib, \
             install it for pkg-config, or enable the `bundled` feature."
        ),
    }
}

mod bundled {
    use super::*;

    /// The library's sources, as lib/meson.build, cpu_ref/meson.build, cpu/meson.build and
    /// cuda/meson.build list them for a build without CUDA, the emulator, NCCL or MPI.
    const SOURCES: &[&str] = &[
        "lib/errors.cpp",
        "lib/version.cpp",
        "lib/handle_registry.cpp",
        "lib/desc.cpp",
        "lib/plan.cpp",
        "lib/dispatch.cpp",
        "lib/call_options.cpp",
        "lib/staged_outputs.cpp",
        "lib/backend_table.cpp",
        "lib/tensor_checks.cpp",
        "lib/mask.cpp",
        "lib/mask_builders.cpp",
        "lib/mask_pattern.cpp",
        "lib/buddy_allocator.cpp",
        "lib/buddy_pool.cpp",
        "lib/ring/ring_comm.cpp",
        "lib/ring/transport_threads.cpp",
        "lib/ring/ring_call.cpp",
        "lib/ring/ring_stats.cpp",
        "lib/ring/ring_pairs.cpp",
        "lib/ring/ring_needs.cpp",
        "lib/ring/ring_kv_chunks.cpp",
        "lib/ring/ring_forward.cpp",
        "lib/ring/ring_backward.cpp",
        "lib/ring/ring_ops_host.cpp",
        "lib/ring/transport_nccl_stub.cpp",
        "lib/ring/transport_mpi_absent.cpp",
        "cpu_ref/reference_key_sets.cpp",
        "cpu_ref/reference_forward.cpp",
        "cpu_ref/reference_backward.cpp",
        "cpu/cpu_thread_pool.cpp",
        "cpu/cpu_backend.cpp",
        "cuda/cuda_backend_stub.cpp",
        "cuda/emu_backend_stub.cpp",
    ];
    /// Compiled once per ISA target with -DDILATTN_CPU_TARGET_<T> (cpu/meson.build).
    const ISA_SOURCES: &[&str] = &["cpu/cpu_forward.cpp", "cpu/cpu_backward.cpp", "cpu/cpu_isa_kernels.cpp"];
    const ISA_DISPATCH: &str = "cpu/cpu_isa_dispatch.cpp";
    const INCLUDE_DIRS: &[&str] = &["lib", "lib/internal", "emu", "cpu_ref", "cpu"];
    /// What meson.build's configure_file writes into the generated config header for this build.
    const CONFIG_H: &str = "#pragma once\n\
        #define DILATTN_BUILD_FLAGS \"portable\"\n\
        #define DILATTN_HAVE_CUDA 0\n\
        #define DILATTN_HAVE_MPI 0\n\
        #define DILATTN_HAVE_NCCL 0\n";

    struct Job {
        source: PathBuf,
        object: PathBuf,
        defines: Vec<String>,
    }

    fn is_gcc(cxx: &str) -> bool {
        Command::new(cxx)
            .arg("--version")
            .output()
            .map(|o| {
                let text = String::from_utf8_lossy(&o.stdout).to_lowercase();
                !text.contains("clang") && (text.contains("g++") || text.contains("gcc"))
            })
            .unwrap_or(false)
    }

    /// Whether the compiler takes `flag` (as meson's has_argument asks).
    fn takes_flag(cxx: &str, flag: &str) -> bool {
        Command::new(cxx)
            .args([flag, "-x", "c++", "-E", "-o", "/dev/null", "/dev/null"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// cpu/meson.build's targets but its test copies bf16emu and amxemu: amx (where the
    /// compiler takes -mamx-tile and -mamx-bf16 too), avx512bf16 (where it takes
    /// -mavx512bf16), avx512, avx2 and the baseline on x86-64 with GCC (they are switched on
    /// by `#pragma GCC target`), else the baseline only.
    fn isa_targets(cxx: &str) -> Vec<&'static str> {
        let x86_64 = env::var("CARGO_CFG_TARGET_ARCH").map(|a| a == "x86_64").unwrap_or(false);
        if x86_64 && is_gcc(cxx) {
            let mut targets = vec!["avx512", "avx2", "baseline"];
            if takes_flag(cxx, "-mavx512bf16") {
                targets.insert(0, "avx512bf16");
                if takes_flag(cxx, "-mamx-tile") && takes_flag(cxx, "-mamx-bf16") {
                    targets.insert(0, "amx");
                }
            }
            targets
        } else {
            vec!["baseline"]
        }
    }

    fn jobs(root: &Path, out: &Path, targets: &[&str]) -> Vec<Job> {
        let object = |source: &str, suffix: &str| {
            out.join(format!("{}{}.o", source.replace(['/', '.'], "_"), suffix))
        };
        let mut jobs: Vec<Job> = SOURCES
            .iter()
            .map(|s| Job { source: root.join(s), object: object(s, ""), defines: vec![] })
            .collect();
        for t in targets {
            for s in ISA_SOURCES {
                jobs.push(Job {
                    source: root.join(s),
                    object: object(s, &format!("_{t}")),
                    defines: vec![format!("-DDILATTN_CPU_TARGET_{}", t.to_uppercase())],
                });
            }
        }
        jobs.push(Job {
            source: root.join(ISA_DISPATCH),
            object: object(ISA_DISPATCH, ""),
            defines: targets
                .iter()
                .map(|t| format!("-DDILATTN_CPU_BUILT_{}", t.to_uppercase()))
                .collect(),
        });
        jobs
    }

    fn compile(cxx: &str, common: &[String], job: &Job) -> Result<(), String> {
        let output = Command::new(cxx)
            .args(common)
            .args(&job.defines)
            .arg("-c")
            .arg(&job.source)
            .arg("-o")
            .arg(&job.object)
            .output()
            .map_err(|e| format!("{cxx} could not run: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "{cxx} {}: {}",
                job.source.display(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(())
    }

    pub fn build() -> Result<(), String> {
        let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
        // rust/dilattn-sys -> the repository root, which holds the C++ sources.
        let root = manifest
            .join("../..")
            .canonicalize()
            .map_err(|e| format!("the repository root above {}: {e}", manifest.display()))?;
        if !root.join("lib/dilattn.h").is_file() {
            return Err(format!(
                "no lib/dilattn.h in {}: the bundled build needs this crate inside the dilattn \
                 repository (rust/dilattn-sys)",
                root.display()
            ));
        }
        let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
        std::fs::write(out.join("dilattn_config.h"), CONFIG_H).map_err(|e| e.to_string())?;
        for dir in ["lib", "cpu", "cpu_ref", "cuda", "emu"] {
            println!("cargo:rerun-if-changed={}", root.join(dir).display());
        }

        let cxx = env::var("CXX").unwrap_or_else(|_| "c++".to_string());
        let targets = isa_targets(&cxx);
        let mut common: Vec<String> = ["-std=c++17", "-O2", "-fPIC", "-pthread", "-DNDEBUG",
                                       "-fvisibility=hidden", "-DDILATTN_BUILDING_LIBRARY"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        common.push(format!("-I{}", out.display()));
        for dir in INCLUDE_DIRS {
            common.push(format!("-I{}", root.join(dir).display()));
        }

        // Compiled in parallel: cargo's job count (NUM_JOBS), else the machine's cores.
        let workers = env::var("NUM_JOBS")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .or_else(|| thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(1)
            .max(1);
        let all = jobs(&root, &out, &targets);
        let objects: Vec<PathBuf> = all.iter().map(|j| j.object.clone()).collect();
        let queue = Arc::new(Mutex::new(all));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let common = Arc::new(common);
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (queue, errors, common, cxx) =
                    (queue.clone(), errors.clone(), common.clone(), cxx.clone());
                thread::spawn(move || loop {
                    let job = match queue.lock().unwrap().pop() {
                        Some(job) => job,
                        None => return,
                    };
                    if let Err(e) = compile(&cxx, &common, &job) {
                        errors.lock().unwrap().push(e);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a compile thread panicked".to_string())?;
        }
        let errors = errors.lock().unwrap();
        if !errors.is_empty() {
            return Err(errors.join("\n"));
        }

        let archive = out.join("libdilattn_bundled.a");
        let _ = std::fs::remove_file(&archive);
        let status = Command::new(env::var("AR").unwrap_or_else(|_| "ar".to_string()))
            .arg("crs")
            .arg(&archive)
            .args(&objects)
            .status()
            .map_err(|e| format!("ar could not run: {e}"))?;
        if !status.success() {
            return Err(format!("ar failed ({status})"));
        }
        println!("cargo:rustc-link-search=native={}", out.display());
        // Whole: the backends' objects are reached through the library's tables, and none may
        // be dropped by the linker.
        println!("cargo:rustc-link-lib=static:+whole-archive=dilattn_bundled");
        println!("cargo:rustc-link-lib=dylib=stdc++");
        println!("cargo:rustc-link-lib=dylib=pthread");
        println!("cargo:rustc-link-lib=dylib=m");
        Ok(())
    }
}
