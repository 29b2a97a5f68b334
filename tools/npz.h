// npz.h - reading and writing NumPy .npz archives: a zip file of .npy members, as np.savez writes.
//
// Only STORED (uncompressed) members are read; a deflated member (np.savez_compressed) is a
// CliError suggesting np.savez, so the tool needs no zlib. Writing produces STORED members with a
// correct CRC-32, which numpy's zipfile verifies. Checked by tests/cli/test_cli_inputs.py (round trips
// both ways, compressed archive rejected).
#ifndef DILATTN_TOOLS_NPZ_H
#define DILATTN_TOOLS_NPZ_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "npy.h"

namespace dilattn_cli {

// Members by name without the ".npy" suffix ("row_ptr"), as np.load(...)[name] names them.
// A member not in `allowed`, a name twice, members that overlap or whose local header
// disagrees with the central directory: a CliError (exit 2) naming the file and the member,
// before any member's bytes are read.
std::map<std::string, NpyArray> read_npz_file(const std::string& path,
                                              const std::vector<std::string>& allowed);
// The bytes of a .npz archive holding `arrays` (member "name.npy" for each).
std::vector<unsigned char> serialize_npz(const std::map<std::string, NpyArray>& arrays);

// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), as zip uses.
uint32_t crc32(const unsigned char* data, size_t size);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_NPZ_H
