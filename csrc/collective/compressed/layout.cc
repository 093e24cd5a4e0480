#include "collective/compressed/layout.h"

#include <algorithm>

#include "collective/algorithms.h"

namespace ringzip::compressed {

Layout layout(const codec::Spec& spec, size_t count, int parts) {
  Layout l{even_parts(count, parts), std::vector<size_t>(parts + 1, 0)};
  for (int i = 0; i < parts; ++i) l.bytes[i + 1] = l.bytes[i] + codec::encoded_bytes(spec, l.len(i));
  return l;
}

size_t topk_block_elems(size_t count, size_t topk_block) {
  const size_t block = topk_block ? std::min(topk_block, count) : count;
  return std::max(block, (count + kMaxTopkBlocks - 1) / kMaxTopkBlocks);
}

Layout topk_blocks(const codec::Spec& spec, size_t count, size_t topk_block) {
  const size_t block = topk_block_elems(count, topk_block);
  const int blocks = static_cast<int>((count + block - 1) / block);
  Layout l{std::vector<size_t>(blocks + 1), std::vector<size_t>(blocks + 1, 0)};
  for (int q = 0; q <= blocks; ++q) l.elem[q] = std::min(count, q * block);
  for (int q = 0; q < blocks; ++q) l.bytes[q + 1] = l.bytes[q] + codec::encoded_bytes(spec, l.len(q));
  return l;
}

Segments segments(const codec::Spec& spec, const Layout& l, size_t want) {
  const int n = l.parts();
  const size_t bucket = static_cast<size_t>(std::max<int64_t>(1, spec.bucket));
  size_t seg = std::max(bucket, want / bucket * bucket);
  size_t longest = 0;
  for (int i = 0; i < n; ++i) longest = std::max(longest, l.len(i));
  while ((longest + seg - 1) / seg >= kGatherStep) seg *= 2;  // segment index must fit the tag's step
  Segments g{std::vector<std::vector<size_t>>(n), std::vector<std::vector<size_t>>(n)};
  for (int i = 0; i < n; ++i) {
    g.elem[i] = {l.elem[i]};
    g.bytes[i] = {0};
    for (size_t e = l.elem[i]; e < l.elem[i + 1];) {
      const size_t len = std::min(seg, l.elem[i + 1] - e);
      e += len;
      g.elem[i].push_back(e);
      g.bytes[i].push_back(g.bytes[i].back() + codec::encoded_bytes(spec, static_cast<int64_t>(len)));
    }
  }
  return g;
}

}  // namespace ringzip::compressed
