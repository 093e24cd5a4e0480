#pragma once
// How the compressed algorithms cut a tensor: parts (one per owner, or top-k's blocks), their
// encoded byte ranges, and the bucket-aligned segments SRA pipelines.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/codec.h"

namespace ringzip::compressed {

struct Layout {               // element parts and their encoded byte ranges
  std::vector<size_t> elem;   // size parts+1
  std::vector<size_t> bytes;  // size parts+1, prefix sums of encoded sizes
  int parts() const { return static_cast<int>(elem.size()) - 1; }
  size_t len(int i) const { return elem[i + 1] - elem[i]; }
  size_t nbytes(int i) const { return bytes[i + 1] - bytes[i]; }
};

// `parts` nearly equal parts (even_parts), part i owned by rank i.
Layout layout(const codec::Spec& spec, size_t count, int parts);

// Top-k's blocks of `block` elements (0: one block), at most kMaxTopkBlocks of them (block q's
// messages are told apart by tag step q).
constexpr size_t kMaxTopkBlocks = 4096;
Layout topk_blocks(const codec::Spec& spec, size_t count, size_t block);
// The elements of each of those blocks but the last (count >= 1).
size_t topk_block_elems(size_t count, size_t block);

// SRA's segments. Every part is cut at multiples of the bucket from the part's start, so each
// segment encodes exactly the buckets (and RNG counters) the whole part would: the result is
// bit for bit that of the unsegmented algorithm. 2 MiB of float32 input per message: on 4
// ranks sharing 2 cores each message costs ~0.3 ms of wake-ups, so 256 KiB segments lost 40%
// on loopback; 256 KiB-8 MiB tie at 1 Gbit/s. Where the codec, not the link, bounds a call,
// fewer messages win: kCoarseSegmentElems (cost::sra_segment_elems says when).
constexpr size_t kSegmentElems = size_t{1} << 19;
constexpr size_t kCoarseSegmentElems = kSegmentElems << 2;
constexpr uint32_t kGatherStep = 0x8000;  // step bit of SRA's phase-2 messages

struct Segments {                                // part i's segment t: elements [elem[i][t], elem[i][t+1]) (absolute)
  std::vector<std::vector<size_t>> elem, bytes;  // bytes: offsets within the part's buffer
  size_t count(int i) const { return elem[i].size() - 1; }
  size_t len(int i, size_t t) const { return elem[i][t + 1] - elem[i][t]; }
  size_t nbytes(int i, size_t t) const { return bytes[i][t + 1] - bytes[i][t]; }
  size_t total_bytes(int i) const { return bytes[i].back(); }
};

// `want`: the segment length asked for (elements; rounded down to whole buckets, at least one).
Segments segments(const codec::Spec& spec, const Layout& l, size_t want = kSegmentElems);

}  // namespace ringzip::compressed
