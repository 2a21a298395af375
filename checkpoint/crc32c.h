// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the per-range checksum of checkpoint
// data files (proto/checkpoint.proto TensorRange.crc32c). Written here rather than taken from a
// library because Debian's zlib only has the IEEE CRC32: the SSE4.2 crc32 instruction where the
// CPU has it (x86-64, checked at run time; ~10x faster, so checksums do not limit save/load
// throughput), else table-driven slicing-by-8.
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
// The table-driven version alone (tests compare both).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_CRC32C_H_
