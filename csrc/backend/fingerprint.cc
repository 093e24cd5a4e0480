#include "backend/fingerprint.h"

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/check.h"

namespace ringzip {
namespace {

// Steps 0xFFF0.. of the call's tag space: far above any algorithm's steps (docs/algorithms.md).
constexpr uint32_t kFingerprintStep = 0xFFF0;

uint64_t mix(uint64_t h, uint64_t v) {  // FNV-1a over 8 bytes
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xFF;
    h *= 0x100000001B3ull;
  }
  return h;
}

const char* op_name(uint8_t op) {
  static const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
  return op < 9 ? names[op] : "?";
}

std::string dtype_name(uint8_t t) {
  if (t == 0xFF) return "none";
  return c10::toString(static_cast<at::ScalarType>(t));
}

std::string codec_of(const Fingerprint& f) { return std::string(f.codec, strnlen(f.codec, sizeof(f.codec))); }

// The first field in which a and b differ, for the error message.
const char* first_difference(const Fingerprint& a, const Fingerprint& b) {
  if (a.magic != b.magic) return "the ringzip wire version";
  if (a.type != b.type) return "the collective";
  if (a.nseq != b.nseq) return "the number of coalesced tensors";
  if (a.seq != b.seq) return "the sequence number";
  if (a.dtype != b.dtype) return "dtype";
  if (a.numel != b.numel) return "element count";
  if (a.shapes != b.shapes) return "tensor sizes";
  if (a.op != b.op) return "reduce op";
  if (a.root != b.root) return "root rank";
  if (codec_of(a) != codec_of(b)) return "codec";
  if (a.codec_hash != b.codec_hash)
    return "codec settings (bucket size, rounding, seed, algorithm, top-k block or the codec version of the "
           "ringzip build) or compressed-call count (error-feedback "
           "states restored from different checkpoints or steps)";
  if (a.algo != b.algo) return "all-reduce algorithm setting";
  return nullptr;
}

}  // namespace

uint32_t Fingerprint::tag_key() const {
  Fingerprint f = *this;
  f.seq = 0;
  uint64_t h = 0xCBF29CE484222325ull;
  uint64_t words[sizeof(Fingerprint) / 8];
  std::memcpy(words, &f, sizeof(f));
  for (uint64_t w : words) h = mix(h, w);
  return static_cast<uint32_t>((h ^ (h >> 14) ^ (h >> 28) ^ (h >> 42)) & 0x3FFFu);
}

void Fingerprint::set_tensors(const std::vector<at::Tensor>& tensors) {
  uint64_t h = 0xCBF29CE484222325ull;
  int64_t total = 0;
  for (const auto& t : tensors) {
    h = mix(mix(h, static_cast<uint64_t>(t.numel())), static_cast<uint64_t>(t.scalar_type()));
    total += t.numel();
  }
  shapes = mix(h, tensors.size());
  numel = total;
  dtype = tensors.empty() ? 0xFF : static_cast<uint8_t>(tensors[0].scalar_type());
}

void Fingerprint::set_codec(const std::string& name, uint32_t settings_hash) {
  std::memset(codec, 0, sizeof(codec));
  std::memcpy(codec, name.data(), std::min(name.size(), sizeof(codec)));
  codec_hash = settings_hash;
}

std::string Fingerprint::describe() const {
  std::ostringstream o;
  o << c10d::opTypeToString(static_cast<c10d::OpType>(type)) << "(";
  o << "dtype " << dtype_name(dtype);
  if (numel >= 0) o << ", " << numel << " elements";
  if (nseq != 1) o << ", " << nseq << " tensors";
  if (op != 0xFF) o << ", op " << op_name(op);
  if (root >= 0) o << ", root " << root;
  const auto cname = codec_of(*this);
  o << ", codec " << (cname.empty() ? "none (exact)" : cname);
  o << ", call #" << seq << ")";
  return o.str();
}

std::string mismatch_message(const std::vector<const Fingerprint*>& by_rank, int detected_on, const std::string& group,
                             bool group_survives, bool* desync, bool keyed_tags) {
  const int n = static_cast<int>(by_rank.size());
  int a = 0;
  while (a < n && !by_rank[a]) ++a;
  for (int b = a + 1; b < n; ++b) {
    if (!by_rank[b]) continue;
    const Fingerprint& x = *by_rank[a];
    const Fingerprint& y = *by_rank[b];
    const char* what = first_difference(x, y);
    if (!what) continue;
    const bool diverged = x.nseq != y.nseq || x.seq != y.seq || x.magic != y.magic;
    if (desync) *desync = diverged;
    std::ostringstream o;
    o << "ringzip: mismatched collective calls in group '" << group << "' (detected on rank " << detected_on << " of "
      << n << "): rank " << a << " called " << x.describe() << " but rank " << b << " called " << y.describe()
      << "; they differ in " << what;
    if (group_survives) {
      o << ". No data was exchanged"
        << (diverged ? "; the ranks' call sequences diverged, so the group is now unusable"
                     : "; the group stays usable");
    } else if (keyed_tags) {
      o << ". No data was exchanged (the calls' tags differ); the group is now unusable (check=\"on\" finds "
           "mismatches before the call and keeps it usable)";
    } else {
      o << ". The calls stalled on the NCCL transport (which matches messages by order, not by tags, so some "
           "bytes may have moved); the NCCL communicator was aborted and the group is now unusable "
           "(check=\"on\" finds mismatches before the call and keeps it usable)";
    }
    return o.str();
  }
  return {};
}

MismatchInfo exchange_fingerprints(Comm& c, const Fingerprint& mine, const std::string& group) {
  const int n = c.size(), r = c.rank();
  MismatchInfo info;
  if (n == 1) return info;
  // Star exchange: rank 0 gathers every record and sends all n back -- two rounds and 2(n-1)
  // messages (a dissemination allgather needs n·log2 n, and on hosts running several ranks per
  // core every message costs a wake-up; docs/reliability.md).
  std::vector<Fingerprint> all(n);
  all[r] = mine;
  // Plain tags: the records must meet even when the calls' tag keys differ.
  const uint32_t gather = Comm::plain_tag(c.seq, kFingerprintStep),
                 result = Comm::plain_tag(c.seq, kFingerprintStep + 1);
  if (r == 0) {
    std::vector<std::unique_ptr<Request>> q;
    std::vector<int> peers;
    for (int j = 1; j < n; ++j) {
      q.push_back(c.post_recv(&all[j], sizeof(Fingerprint), j, gather));
      peers.push_back(j);
    }
    c.wait_all(q, peers, "fingerprint exchange: receive from");
    q.clear();
    for (int j = 1; j < n; ++j) q.push_back(c.post_send(all.data(), n * sizeof(Fingerprint), j, result));
    c.wait_all(q, peers, "fingerprint exchange: send to");
  } else {
    auto sq = c.post_send(&all[r], sizeof(Fingerprint), 0, gather);
    auto rq = c.post_recv(all.data(), n * sizeof(Fingerprint), 0, result);
    c.wait(*rq, 0, "fingerprint exchange: receive from");
    c.wait(*sq, 0, "fingerprint exchange: send to");
  }
  // Every rank compares the same records the same way, so all raise the same message.
  std::vector<const Fingerprint*> by_rank(n);
  for (int j = 0; j < n; ++j) by_rank[j] = &all[j];
  info.message = mismatch_message(by_rank, r, group, /*group_survives=*/true, &info.desync);
  info.found = !info.message.empty();
  return info;
}

}  // namespace ringzip
