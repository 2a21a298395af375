// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the per-range checksum of checkpoint
// data files (proto/checkpoint.proto TensorRange.crc32c). Table-driven, slicing-by-8, written
// here rather than taken from a library because Debian's zlib only has the IEEE CRC32.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_CHECKPOINT_CRC32C_H_
#define SHARDLINE_CHECKPOINT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace shardline::checkpoint {

// Extends `crc` (the CRC32C of earlier bytes; 0 for none) with data[0, n).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_CRC32C_H_
