//! The hand-written bindings (src/lib.rs) agree with lib/dilattn.h, lib/dilattn_mask.h,
//! lib/dilattn_pool.h and lib/dilattn_ring.h:
//! the same functions with the same parameter counts, the same enum values, and struct sizes
//! equal to the sizes the library writes into struct_size. A change of the header that the
//! bindings miss fails here.
use std::collections::BTreeMap;
use std::mem::size_of;
use std::path::PathBuf;

use dilattn_sys::*;

const BINDINGS: &str = include_str!("../src/lib.rs");

fn header_text() -> String {
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../lib");
    let mut text = String::new();
    for name in ["dilattn.h", "dilattn_mask.h", "dilattn_pool.h", "dilattn_ring.h"] {
        let path = lib.join(name);
        text += &std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    without_preprocessor(&without_comments(&text))
}

fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out += &rest[..start];
        let end = rest[start..].find("*/").expect("unterminated comment") + start + 2;
        rest = &rest[end..];
    }
    out += rest;
    out.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n")
}

/// Drops #-lines and their backslash continuations (DILATTN_API's own definition among them).
fn without_preprocessor(text: &str) -> String {
    let mut out = Vec::new();
    let mut continued = false;
    for line in text.lines() {
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if !directive {
            out.push(line);
        }
    }
    out.join("\n")
}

fn count_params(params: &str) -> usize {
    let params = params.trim();
    if params.is_empty() || params == "void" {
        return 0;
    }
    params.split(',').filter(|p| !p.trim().is_empty()).count()
}

/// name -> parameter count of every DILATTN_API function of the headers.
fn header_functions() -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    for statement in header_text().split(';') {
        let Some(at) = statement.find("DILATTN_API") else { continue };
        let decl = &statement[at..];
        let open = decl.find('(').expect("a function declaration");
        let name = decl[..open].split_whitespace().last().unwrap().trim_start_matches('*');
        let close = decl.rfind(')').unwrap();
        found.insert(name.to_string(), count_params(&decl[open + 1..close]));
    }
    found
}

/// name -> parameter count of every `pub fn` in the extern block of src/lib.rs.
fn bound_functions() -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    let mut rest = BINDINGS;
    while let Some(at) = rest.find("pub fn ") {
        let decl = &rest[at + 7..];
        let open = decl.find('(').unwrap();
        let close = decl.find(')').unwrap();
        found.insert(decl[..open].trim().to_string(), count_params(&decl[open + 1..close]));
        rest = &decl[close..];
    }
    found
}

/// DILATTN_NAME -> value of every enumerator in the headers.
fn header_enum_values() -> BTreeMap<String, i64> {
    let text = header_text();
    let mut found = BTreeMap::new();
    for piece in text.split([',', '{', '}', ';']) {
        let mut parts = piece.splitn(2, '=');
        let (Some(name), Some(value)) = (parts.next(), parts.next()) else { continue };
        let name = name.trim();
        if name.starts_with("DILATTN_") && !name.contains(' ') {
            if let Ok(v) = value.trim().parse::<i64>() {
                found.insert(name.to_string(), v);
            }
        }
    }
    found
}

/// DILATTN_NAME -> value of every `pub const` in src/lib.rs.
fn bound_constants() -> BTreeMap<String, i64> {
    let mut found = BTreeMap::new();
    for line in BINDINGS.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const ") else { continue };
        let name = rest.split(':').next().unwrap().trim();
        let value = rest.split('=').nth(1).unwrap().trim().trim_end_matches(';');
        found.insert(name.to_string(), value.parse().unwrap());
    }
    found
}

#[test]
fn every_header_function_is_bound_with_its_parameter_count() {
    let header = header_functions();
    assert!(header.len() > 30, "the header parser found only {} functions", header.len());
    assert_eq!(header, bound_functions());
}

#[test]
fn every_enum_value_matches_the_header() {
    let header = header_enum_values();
    assert!(header.len() > 40, "the header parser found only {} enumerators", header.len());
    assert_eq!(header, bound_constants());
}

#[test]
fn struct_sizes_and_fields_match_the_library() {
    let t = unsafe { dilattn_tensor_contiguous(std::ptr::null_mut(), DILATTN_F16, 2, 3, 4, 5) };
    assert_eq!(t.struct_size, size_of::<dilattn_tensor>());
    assert_eq!((t.dtype, t.device), (DILATTN_F16, DILATTN_DEVICE_CPU));
    assert_eq!((t.shape, t.strides), ([2, 3, 4, 5], [60, 20, 5, 1]));
    let s = unsafe { dilattn_shape_make(1, 2, 3, 4, 5, 6) };
    assert_eq!(s.struct_size, size_of::<dilattn_shape>());
    assert_eq!((s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv, s.head_dim),
               (1, 2, 3, 4, 5, 6));
    let mut mask: dilattn_mask = std::ptr::null_mut();
    assert_eq!(unsafe { dilattn_mask_local(&mut mask, 12, 8, 4, 2, 0, 0) }, DILATTN_SUCCESS);
    let mut view = unsafe { std::mem::zeroed::<dilattn_bsr_view>() };
    let mut nnz = 0i64;
    assert_eq!(unsafe { dilattn_mask_get(mask, &mut view, &mut nnz) }, DILATTN_SUCCESS);
    assert_eq!(view.struct_size, size_of::<dilattn_bsr_view>());
    assert_eq!((view.seqlen_q, view.seqlen_k, view.block_q, view.block_k, view.num_heads),
               (12, 8, 4, 2, 1));
    assert_eq!(view.index_type, DILATTN_INDEX_INT64);
    assert!(nnz > 0);
    assert_eq!(unsafe { dilattn_mask_destroy(mask) }, DILATTN_SUCCESS);
    let mut options = unsafe { std::mem::zeroed::<dilattn_pool_options>() };
    assert_eq!(unsafe { dilattn_pool_options_init(&mut options, 4096) }, DILATTN_SUCCESS);
    assert_eq!(options.struct_size, size_of::<dilattn_pool_options>());
    let call = unsafe { dilattn_call_options_make() };
    assert_eq!(call.struct_size, size_of::<dilattn_call_options>());
    assert_eq!((call.dropout_seed, call.dropout_offset), (0, 0));
    assert_eq!((options.arena_bytes, options.min_block_bytes, options.growth), (4096, 256,
               DILATTN_POOL_FIXED));
}

#[test]
fn pool_stats_layout_matches_the_library() {
    // The library refuses a struct_size that stops before free_blocks and fills the rest.
    let mut options = unsafe { std::mem::zeroed::<dilattn_pool_options>() };
    unsafe { dilattn_pool_options_init(&mut options, 4096) };
    let mut pool: dilattn_pool = std::ptr::null_mut();
    assert_eq!(unsafe { dilattn_pool_create_host(&mut pool, &options) }, DILATTN_SUCCESS);
    let mut stats = unsafe { std::mem::zeroed::<dilattn_pool_stats>() };
    stats.struct_size = std::mem::offset_of!(dilattn_pool_stats, free_blocks) - 1;
    assert_eq!(unsafe { dilattn_pool_get_stats(pool, &mut stats) }, DILATTN_ERROR_INVALID_VALUE);
    stats.struct_size = size_of::<dilattn_pool_stats>();
    assert_eq!(unsafe { dilattn_pool_get_stats(pool, &mut stats) }, DILATTN_SUCCESS);
    assert_eq!((stats.num_arenas, stats.arena_bytes_total, stats.largest_free_block),
               (1, 4096, 4096));
    assert!(stats.free_blocks.iter().enumerate().all(|(k, &n)| n == usize::from(k == 12)));
    assert_eq!(unsafe { dilattn_pool_destroy(pool) }, DILATTN_SUCCESS);
}

#[test]
fn library_version_is_the_crate_version() {
    let v = unsafe { dilattn_version() };
    let version = format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
}
