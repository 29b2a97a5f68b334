# dilattn_example.jl - calling dilattn's C ABI from Julia with ccall: a dilated (LongNet)
# forward on the fast cpu backend, checked against the f64 reference backend, and a dense
# forward checked against a few lines of Julia (SPEC 2).
#
# Run (after building the library: meson setup build -Dcuda=disabled && meson compile -C build):
#   DILATTN_LIB=build/lib/libdilattn.so julia examples/julia/dilattn_example.jl
#
# Layout: Julia arrays are column-major, so a Julia array of size (D, H, N, B) has exactly the
# memory of the C ABI's row-major [B, N, H, D]; cview() below describes it that way, without a
# copy. Not run by CI (no Julia toolchain there).

const LIB = get(ENV, "DILATTN_LIB", joinpath(@__DIR__, "..", "..", "build", "lib", "libdilattn.so"))

# ---------------------------------------------------------------- the C ABI (dilattn.h)
const F32, F64 = Cint(0), Cint(1)
const BACKEND_REF, BACKEND_CPU = Cint(1), Cint(2)
const HEADS_MOD = Cint(0)

struct DilattnTensor          # struct dilattn_tensor
    struct_size::Csize_t
    data::Ptr{Cvoid}
    dtype::Cint
    device::Cint
    device_index::Int32
    shape::NTuple{4,Int64}
    strides::NTuple{4,Int64}
end

struct DilattnShape           # struct dilattn_shape
    struct_size::Csize_t
    batch::Int64
    seqlen_q::Int64
    seqlen_k::Int64
    heads_q::Int64
    heads_kv::Int64
    head_dim::Int64
end

function check(status)
    if status != 0
        name = unsafe_string(ccall((:dilattn_status_string, LIB), Cstring, (Cint,), status))
        detail = unsafe_string(ccall((:dilattn_last_error, LIB), Cstring, ()))
        error("$name: $detail")
    end
end

"The C view [B, N, H, D] of a Julia array of size (D, H, N, B): the same memory."
function cview(a::Array{T,4}) where {T}
    dtype = T === Float64 ? F64 : F32
    d, h, n, b = size(a)
    DilattnTensor(sizeof(DilattnTensor), pointer(a), dtype, 0, 0, (b, n, h, d),
                  (n * h * d, h * d, d, 1))
end

"O, LSE = attention(Q, K, V) with segments/dilations (none: dense) on a backend."
function attention(q::Array{T,4}, k, v; segments=Int64[], dilations=Int64[], causal=false,
                   backend=BACKEND_CPU) where {T}
    d, h, n, b = size(q)
    hkv, nk = size(k, 2), size(k, 3)
    desc = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:dilattn_desc_create, LIB), Cint, (Ptr{Ptr{Cvoid}},), desc))
    if !isempty(segments)
        check(ccall((:dilattn_desc_set_dilated, LIB), Cint,
                    (Ptr{Cvoid}, Int32, Ptr{Int64}, Ptr{Int64}, Cint),
                    desc[], length(segments), segments, dilations, HEADS_MOD))
    end
    check(ccall((:dilattn_desc_set_causal, LIB), Cint, (Ptr{Cvoid}, Int32), desc[], causal))
    shape = ccall((:dilattn_shape_make, LIB), DilattnShape,
                  (Int64, Int64, Int64, Int64, Int64, Int64), b, n, nk, h, hkv, d)
    plan = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:dilattn_plan_create, LIB), Cint,
                (Ptr{Ptr{Cvoid}}, Ptr{Cvoid}, Ref{DilattnShape}, Cint, Cint),
                plan, desc[], shape, T === Float64 ? F64 : F32, backend))
    ccall((:dilattn_desc_destroy, LIB), Cint, (Ptr{Cvoid},), desc[])
    o = zeros(T, size(q))
    lse = zeros(backend == BACKEND_REF ? Float64 : Float32, 1, n, h, b)  # C [B, H, N, 1]
    GC.@preserve q k v o lse begin
        lse_view = DilattnTensor(sizeof(DilattnTensor), pointer(lse),
                                 eltype(lse) === Float64 ? F64 : F32, 0, 0, (b, h, n, 1),
                                 (h * n, n, 1, 1))
        check(ccall((:dilattn_forward, LIB), Cint,
                    (Ptr{Cvoid}, Ref{DilattnTensor}, Ref{DilattnTensor}, Ref{DilattnTensor},
                     Ref{DilattnTensor}, Ref{DilattnTensor}, Ptr{Cvoid}, Csize_t),
                    plan[], cview(q), cview(k), cview(v), cview(o), lse_view, C_NULL, 0))
    end
    ccall((:dilattn_plan_destroy, LIB), Cint, (Ptr{Cvoid},), plan[])
    return o, dropdims(lse; dims=1)   # lse[i, h, b]
end

"Dense attention of SPEC 2 in plain Julia, f64."
function dense_julia(q, k, v)
    d, h, n, b = size(q)
    o = zeros(Float64, size(q))
    for bi in 1:b, hi in 1:h, i in 1:n
        s = [sum(q[:, hi, i, bi] .* k[:, hi, j, bi]) / sqrt(d) for j in 1:size(k, 3)]
        p = exp.(s .- maximum(s))
        p ./= sum(p)
        o[:, hi, i, bi] = sum(p[j] .* v[:, hi, j, bi] for j in eachindex(p))
    end
    o
end

# ---------------------------------------------------------------- the example
B, N, H, D = 2, 64, 4, 16
q, k, v = (rand(Float32, D, H, N, B) .* 2 .- 1 for _ in 1:3)
config = (segments=Int64[16, 64], dilations=Int64[1, 4], causal=true)
o_cpu, _ = attention(q, k, v; config..., backend=BACKEND_CPU)
o_ref, _ = attention(Float64.(q), Float64.(k), Float64.(v); config..., backend=BACKEND_REF)
err = maximum(abs.(o_cpu .- o_ref))
println("dilated causal forward, cpu (f32) vs ref (f64): max |diff| = $err")
@assert all(abs.(o_cpu .- o_ref) .<= 1e-5 .+ 1e-4 .* abs.(o_ref))   # SPEC 8, f32

q64, k64, v64 = Float64.(q), Float64.(k), Float64.(v)
o_dense, _ = attention(q64, k64, v64; backend=BACKEND_REF)
err = maximum(abs.(o_dense .- dense_julia(q64, k64, v64)))
println("dense forward, ref vs plain Julia: max |diff| = $err")
@assert err < 1e-12
println("ok")
