// cpu_amx_tiles.h - the amx target's bf16 pair products on AMX tiles (AMX-TILE + AMX-BF16:
// Sapphire Rapids and newer Xeons), SPEC 12. Included by cpu_pair_dot.h after its word types;
// its scores_pairs_tile and accumulate_pairs_tile hand whole 16-row blocks to the functions here
// and keep their vector code for the rest (a block's tail rows, a range with an odd end, result
// columns past the last 64).
//
// An AMX tile register holds up to 16 rows of 64 bytes. tdpbf16ps C, A, B adds to each f32 of
// C (16 x 16) the dot product of row r of A (16 words: 32 bf16 along the shared dimension) with
// column c of B (16 word rows: the same 32 bf16 as 16 pairs), the pairs in the order of
// memory, the layout cpu_pair_dot.h already keeps: Q's row words are A, K's key pairs are B, P's
// and dS's row words are A, V's (and K's, Q's, dO's) pair rows are B. Only the column words of
// P and dS (pairs along the query rows, for dK and dV) are the wrong way round for A: they are
// transposed into a scratch tile first, 16 x 16 words in registers (transpose_block).
// Like vdpbf16ps, the instruction reads bf16 denormals as zero and accumulates in f32 with
// round to nearest even; the order of its sums within a tile is the hardware's, so results
// differ from avx512bf16's in the last bits (within SPEC 8) and are the same on every run and
// thread count.
//
// Registers used: tmm0-3 the four C tiles of 64 result columns, tmm4 A, tmm6 and tmm7 B by turns.
// A short chunk of the shared dimension (fewer than 16 pairs) is packed into a scratch tile
// with zero words past its end, in A and in B alike, so nothing outside the range is multiplied,
// not even as 0 x inf (SPEC 13).
//
// amxemu, a test path (cpu_isa_target.h), runs all of this with the tile instructions emulated
// below, so every cpu test runs it on any AVX2 CPU.
//
// The tile configuration is per thread: configure_tiles() loads it on a thread's first product
// and TileScope (one per work item of the forward and backward, cpu_forward.cpp and
// cpu_backward.cpp) releases it at the item's end, so other code on the thread (another
// library's AMX kernels) never finds our configuration, nor we theirs.
#ifndef DILATTN_CPU_AMX_TILES_H
#define DILATTN_CPU_AMX_TILES_H

#if DILATTN_CPU_AMX

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

#if DILATTN_CPU_AMX == 2
// amxemu (cpu_isa_target.h): the tile instructions emulated, so the amx code runs in tests on
// any AVX2 CPU. A thread's eight tiles are 16 rows of 16 words (or f32). tdpbf16ps as the
// Software Developer's Manual's pseudo-code orders it, as we read it: for each f32 of row m of
// C, two sums from zero over the 16 words k of A's row m, one of the low products (A's low
// half by the low half of B's row k word) and one of the high products, each step one fused
// multiply-add; then C + (low sum + high sum). Denormals are zero on the way in and out
// (cpu_pair_dot.h's flush_denormal). The intrinsics guide writes another order; the hardware's
// may differ from both in the last bits, within SPEC 8 either way.
// products counts the tdpbf16ps executed (tests/cpu/test_cpu_amx_tiles.cpp reads it).
struct EmulatedTiles {
  alignas(64) word_t tile[8][16][16];
  bool configured;
  uint64_t products;
};
inline thread_local EmulatedTiles emulated_tiles;

// What the hardware faults on (#UD, #GP) stops the test here.
[[noreturn]] inline void emulated_fault(const char* what) {
  std::fprintf(stderr, "amxemu: %s\n", what);
  std::abort();
}
inline void emulated_use() {
  if (!emulated_tiles.configured)
    emulated_fault("a tile instruction before the tile configuration was loaded");
}
// ldtilecfg: the only configuration used here (TileConfig below): palette 1, tiles 0-7 of 16
// rows of 64 bytes.
inline void emulated_configure(const void* config) {
  const unsigned char* c = static_cast<const unsigned char*>(config);
  bool ok = c[0] == 1;
  for (int t = 0; t < 8; ++t) {
    uint16_t row_bytes;
    std::memcpy(&row_bytes, c + 16 + 2 * t, sizeof row_bytes);
    ok = ok && row_bytes == 64 && c[48 + t] == 16;
  }
  if (!ok) emulated_fault("ldtilecfg: not palette 1 with tiles 0-7 of 16 rows of 64 bytes");
  emulated_tiles.configured = true;
}
inline void emulated_zero(int t) {
  emulated_use();
  std::memset(emulated_tiles.tile[t], 0, sizeof emulated_tiles.tile[t]);
}
inline void emulated_load(int t, const void* base, int64_t stride) {
  emulated_use();
  for (int r = 0; r < 16; ++r)
    std::memcpy(emulated_tiles.tile[t][r], static_cast<const char*>(base) + r * stride, 64);
}
inline void emulated_store(int t, void* base, int64_t stride) {
  emulated_use();
  for (int r = 0; r < 16; ++r)
    std::memcpy(static_cast<char*>(base) + r * stride, emulated_tiles.tile[t][r], 64);
}
inline void emulated_dpbf16ps(int c, int a, int b) {
  static_assert(kWords == 16, "a tile row is one vector of the 64-byte targets");
  emulated_use();
  ++emulated_tiles.products;
  for (int m = 0; m < 16; ++m) {
    vfloat low_sum = vfloat{}, high_sum = vfloat{};
    for (int k = 0; k < 16; ++k) {
      const wvec w = splat_word(emulated_tiles.tile[a][m][k]);
      const wvec row = load_words(emulated_tiles.tile[b][k]);
      const vfloat a_low = flush_denormal((vfloat)(w << 16));
      const vfloat b_low = flush_denormal((vfloat)(row << 16));
      const vfloat a_high = flush_denormal((vfloat)(w & 0xFFFF0000u));
      const vfloat b_high = flush_denormal((vfloat)(row & 0xFFFF0000u));
      low_sum = flush_denormal(madd(a_low, b_low, low_sum));
      high_sum = flush_denormal(madd(a_high, b_high, high_sum));
    }
    float* const c_row = reinterpret_cast<float*>(emulated_tiles.tile[c][m]);
    const vfloat pair_sum = flush_denormal(low_sum + high_sum);
    vstore(c_row, flush_denormal(flush_denormal(vload(c_row)) + pair_sum));
  }
}
#define DILATTN_TILE_CONFIGURE(config) emulated_configure(config)
#define DILATTN_TILE_RELEASE() emulated_tiles.configured = false
#define DILATTN_TILE_ZERO(t) emulated_zero(t)
#define DILATTN_TILE_LOAD(t, base, stride) emulated_load(t, base, stride)
#define DILATTN_TILE_STORE(t, base, stride) emulated_store(t, base, stride)
#define DILATTN_TILE_DPBF16PS(c, a, b) emulated_dpbf16ps(c, a, b)
#else
// amx: the instructions, by their intrinsics (a tile register is named by a literal number).
#define DILATTN_TILE_CONFIGURE(config) _tile_loadconfig(config)
#define DILATTN_TILE_RELEASE() _tile_release()
#define DILATTN_TILE_ZERO(tile) _tile_zero(tile)
#define DILATTN_TILE_LOAD(tile, base, stride) _tile_loadd(tile, base, stride)
#define DILATTN_TILE_STORE(tile, base, stride) _tile_stored(tile, base, stride)
#define DILATTN_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#endif

constexpr int kTileRows = 16;              // rows of every tile used here
constexpr int kTileWords = 16;             // 64-byte rows: 16 words or 16 f32
constexpr int kTileCols = 4 * kTileWords;  // result columns of the four C tiles
constexpr int kTileBytes = 64;
static_assert(kBC == kTileCols, "an S tile's columns are the four C tiles");
static_assert(kTileRows % kMR == 0, "a tile's rows are whole register blocks (dropout draws)");

// The 64-byte operand of ldtilecfg: palette 1, every tile used here 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t row_bytes[16] = {};
  uint8_t rows[16] = {};
};

inline thread_local bool tiles_configured = false;

inline void configure_tiles() {
  if (tiles_configured) return;
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.row_bytes[t] = kTileBytes;
    config.rows[t] = kTileRows;
  }
  DILATTN_TILE_CONFIGURE(&config);
  tiles_configured = true;
}

// Releases the thread's tiles at the end of a work item (see the top of this file).
class TileScope {
 public:
  TileScope() = default;
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
  ~TileScope() {
    if (tiles_configured) {
      DILATTN_TILE_RELEASE();
      tiles_configured = false;
    }
  }
};

// 16 rows of n <= 16 words (row r at src + r ld) into a tile image, zeros past n; nothing past
// n is read.
inline void pack_row_words(const word_t* src, int64_t ld, int64_t n, word_t* tile) {
  for (int r = 0; r < kTileRows; ++r)
    for (int p = 0; p < kTileWords; ++p) tile[r * kTileWords + p] = p < n ? src[r * ld + p] : 0u;
}

// Word rows p < n (16 words each, row p at src + p ld) into a tile image, rows past n zero.
inline void pack_word_rows(const word_t* src, int64_t ld, int64_t n, word_t* tile) {
  for (int p = 0; p < kTileRows; ++p)
    store_words(tile + p * kTileWords, p < n ? load_words(src + p * ld) : wvec{});
}

// The transposed case: word (r, p) at src[r + p step] for r < 16, p < n, into a tile image of
// rows r (zeros past n): 16 vectors of 16 words transposed in registers.
inline void pack_column_words(const word_t* src, int64_t step, int64_t n, word_t* tile) {
  wvec v[kTileWords];
  for (int p = 0; p < kTileWords; ++p) v[p] = p < n ? load_words(src + p * step) : wvec{};
  transpose_block(v);
  for (int r = 0; r < kTileRows; ++r) store_words(tile + r * kTileWords, v[r]);
}

// B's four tiles of one chunk of pairs (rows p0.., n <= 16 of them, ld words apart, 64 columns
// from b) multiplied into C tiles 0-3 by the A tile in tmm4. A whole chunk is read in place.
inline void chunk_into_c_tiles(const word_t* b, int64_t ld, int64_t n) {
  if (n == kTileRows) {
    const int64_t stride = ld * static_cast<int64_t>(sizeof(word_t));
    DILATTN_TILE_LOAD(6, b, stride);
    DILATTN_TILE_DPBF16PS(0, 4, 6);
    DILATTN_TILE_LOAD(7, b + kTileWords, stride);
    DILATTN_TILE_DPBF16PS(1, 4, 7);
    DILATTN_TILE_LOAD(6, b + 2 * kTileWords, stride);
    DILATTN_TILE_DPBF16PS(2, 4, 6);
    DILATTN_TILE_LOAD(7, b + 3 * kTileWords, stride);
    DILATTN_TILE_DPBF16PS(3, 4, 7);
    return;
  }
  alignas(64) word_t packed[4][kTileRows * kTileWords];
  for (int q = 0; q < 4; ++q) pack_word_rows(b + q * kTileWords, ld, n, packed[q]);
  DILATTN_TILE_LOAD(6, packed[0], kTileBytes);
  DILATTN_TILE_DPBF16PS(0, 4, 6);
  DILATTN_TILE_LOAD(7, packed[1], kTileBytes);
  DILATTN_TILE_DPBF16PS(1, 4, 7);
  DILATTN_TILE_LOAD(6, packed[2], kTileBytes);
  DILATTN_TILE_DPBF16PS(2, 4, 6);
  DILATTN_TILE_LOAD(7, packed[3], kTileBytes);
  DILATTN_TILE_DPBF16PS(3, 4, 7);
}

inline void load_c_tiles(const float* c, int64_t ld) {
  const int64_t stride = ld * static_cast<int64_t>(sizeof(float));
  DILATTN_TILE_LOAD(0, c, stride);
  DILATTN_TILE_LOAD(1, c + kTileWords, stride);
  DILATTN_TILE_LOAD(2, c + 2 * kTileWords, stride);
  DILATTN_TILE_LOAD(3, c + 3 * kTileWords, stride);
}

inline void store_c_tiles(float* c, int64_t ld) {
  const int64_t stride = ld * static_cast<int64_t>(sizeof(float));
  DILATTN_TILE_STORE(0, c, stride);
  DILATTN_TILE_STORE(1, c + kTileWords, stride);
  DILATTN_TILE_STORE(2, c + 2 * kTileWords, stride);
  DILATTN_TILE_STORE(3, c + 3 * kTileWords, stride);
}

// S[r][c] = pre * <Q_r, K_c> for r < 16, c < kBC: Q as row words (ldq apart), K as key pairs
// [pairs][kBC]; scores_pairs_tile's contract for one 16-row block. pre multiplies the finished
// sums, as the vector code does.
inline void amx_scores_rows16(const word_t* Q, int64_t ldq, const word_t* Kp, int64_t pairs,
                              float pre, float* S) {
  configure_tiles();
  DILATTN_TILE_ZERO(0);
  DILATTN_TILE_ZERO(1);
  DILATTN_TILE_ZERO(2);
  DILATTN_TILE_ZERO(3);
  alignas(64) word_t a_packed[kTileRows * kTileWords];
  for (int64_t p0 = 0; p0 < pairs; p0 += kTileWords) {
    const int64_t n = std::min<int64_t>(kTileWords, pairs - p0);
    if (n == kTileWords) {
      DILATTN_TILE_LOAD(4, Q + p0, ldq * static_cast<int64_t>(sizeof(word_t)));
    } else {
      pack_row_words(Q + p0, ldq, n, a_packed);
      DILATTN_TILE_LOAD(4, a_packed, kTileBytes);
    }
    chunk_into_c_tiles(Kp + p0 * kBC, kBC, n);
  }
  store_c_tiles(S, kBC);
  for (int r = 0; r < kTileRows; ++r)
    for (int c = 0; c < kBC; c += kWords) vstore(S + r * kBC + c, vload(S + r * kBC + c) * pre);
}

// The most chunks of 16 pairs one accumulation takes on tiles: the shared index of every
// product here is a tile's keys (kBC) or query rows (kBR), at most 64 values, 2 chunks.
constexpr int kMaxChunks = 4;

// O[r][0:width) += sum over pairs p in [p0, p1) of A(r, p) B(p)[0:width) for r < 16, width a
// multiple of kTileCols; A's word (r, p) at A[r lda + p a_step], B's word (p, d) at
// Bp[p ldb + d]: accumulate_pairs_tile's contract for one 16-row block and whole pairs.
// Returns false, having done nothing, for a layout the tiles do not take (A neither row words
// nor column words, or more than kMaxChunks chunks).
inline bool amx_accumulate_rows16(float* O, int64_t ldo, const word_t* A, int64_t lda,
                                  int64_t a_step, int64_t p0, int64_t p1, const word_t* Bp,
                                  int64_t ldb, int64_t width) {
  const int64_t chunks = (p1 - p0 + kTileWords - 1) / kTileWords;
  if (chunks > kMaxChunks || (a_step != 1 && lda != 1)) return false;
  configure_tiles();
  // A's tiles once for every 64 result columns: in place where they are whole row words,
  // packed otherwise.
  alignas(64) word_t a_packed[kMaxChunks][kTileRows * kTileWords];
  const word_t* a_tile[kMaxChunks];
  int64_t a_stride[kMaxChunks];
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t p = p0 + ch * kTileWords, n = std::min<int64_t>(kTileWords, p1 - p);
    if (a_step == 1 && n == kTileWords) {
      a_tile[ch] = A + p;
      a_stride[ch] = lda * static_cast<int64_t>(sizeof(word_t));
      continue;
    }
    if (a_step == 1)
      pack_row_words(A + p, lda, n, a_packed[ch]);
    else
      pack_column_words(A + p * a_step, a_step, n, a_packed[ch]);
    a_tile[ch] = a_packed[ch];
    a_stride[ch] = kTileBytes;
  }
  for (int64_t d = 0; d < width; d += kTileCols) {
    load_c_tiles(O + d, ldo);
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t p = p0 + ch * kTileWords;
      DILATTN_TILE_LOAD(4, a_tile[ch], a_stride[ch]);
      chunk_into_c_tiles(Bp + p * ldb + d, ldb, std::min<int64_t>(kTileWords, p1 - p));
    }
    store_c_tiles(O + d, ldo);
  }
  return true;
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#else  // !DILATTN_CPU_AMX

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {
// Nothing to release where the products never use tiles.
struct TileScope {};
}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_AMX

#endif  // DILATTN_CPU_AMX_TILES_H
