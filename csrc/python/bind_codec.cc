// Python entry points of the codec kernels: ringzip._C.codec.{encode, decode, decode_accumulate,
// decode_add_encode, encode_feedback, residual, topk_feedback, encoded_bytes, k_for, biased, name, quant_kernels}. Thin: checks tensors, converts them to
// raw pointers, releases the GIL around the kernel. std::invalid_argument -> ValueError,
// std::runtime_error -> RuntimeError (pybind11's standard translation).
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "codec/codec.h"
#include "python/bindings.h"
#include "python/tensor_args.h"

namespace py = pybind11;
namespace cd = ringzip::codec;

namespace ringzip {
namespace {

constexpr const char* kModule = "ringzip.codec";
[[noreturn]] void bad(const std::string& msg) { pyargs::bad(kModule, msg); }
void check_cpu_contig(const at::Tensor& t, const char* what) { pyargs::check_contiguous_on(kModule, t, what, false); }
cd::InType in_type(const at::Tensor& x) { return pyargs::in_type(kModule, x); }

void check_f32(const at::Tensor& t, const char* what) { pyargs::check_f32_on(kModule, t, what, false); }

void check_payload(const at::Tensor& p) {
  check_cpu_contig(p, "payload");
  if (p.scalar_type() != at::kByte) bad(std::string("payload must be uint8, got ") + c10::toString(p.scalar_type()));
}

// The caller's buffer (reused, as the collectives reuse theirs; kernel timings should not see
// page faults) or a fresh one.
at::Tensor payload_out(const std::optional<at::Tensor>& out, int64_t bytes) {
  if (!out) return at::empty({bytes}, at::kByte);
  check_payload(*out);
  if (out->numel() != bytes)
    bad("out must have " + std::to_string(bytes) + " bytes, got " + std::to_string(out->numel()));
  return *out;
}
cd::RngKey key_of(uint64_t seed, uint32_t seq, uint32_t stream) { return cd::RngKey{seed, seq, stream}; }

void check_offset(int64_t off) {
  if (off < 0) bad("elem_offset must be >= 0");
}

at::Tensor encode(const std::string& spec, const at::Tensor& x, uint64_t seed, uint32_t seq, uint32_t stream,
                  int64_t off, int64_t bucket, bool stochastic, std::optional<at::Tensor> out_opt) {
  cd::Spec sp = cd::parse(spec, bucket, stochastic);
  check_cpu_contig(x, "x");
  cd::InType t = in_type(x);
  check_offset(off);
  int64_t n = x.numel();
  at::Tensor out = payload_out(out_opt, (int64_t)cd::encoded_bytes(sp, n));
  {
    py::gil_scoped_release nogil;
    cd::encode(sp, t, x.data_ptr(), n, off, key_of(seed, seq, stream), out.data_ptr<uint8_t>());
  }
  return out;
}

at::Tensor decode(const std::string& spec, const at::Tensor& payload, int64_t n, uint64_t seed, uint32_t seq,
                  uint32_t stream, int64_t off, int64_t bucket) {
  cd::Spec sp = cd::parse(spec, bucket, true);
  check_payload(payload);
  check_offset(off);
  if (n < 0) bad("n must be >= 0");
  at::Tensor out = at::empty({n}, at::kFloat);
  {
    py::gil_scoped_release nogil;
    cd::decode(sp, payload.data_ptr<uint8_t>(), payload.numel(), n, off, key_of(seed, seq, stream),
               out.data_ptr<float>());
  }
  return out;
}

void decode_accumulate(const std::string& spec, const at::Tensor& payload, at::Tensor& acc, uint64_t seed, uint32_t seq,
                       uint32_t stream, int64_t off, int64_t bucket) {
  cd::Spec sp = cd::parse(spec, bucket, true);
  check_payload(payload);
  check_f32(acc, "acc");
  check_offset(off);
  py::gil_scoped_release nogil;
  cd::decode_accumulate(sp, payload.data_ptr<uint8_t>(), payload.numel(), acc.numel(), off, key_of(seed, seq, stream),
                        acc.data_ptr<float>());
}

at::Tensor decode_add_encode(const std::string& spec, const at::Tensor& payload, const at::Tensor& local, uint64_t seed,
                             uint32_t seq, uint32_t dec_stream, uint32_t enc_stream, int64_t off, int64_t bucket,
                             bool stochastic, std::optional<at::Tensor> out_opt) {
  cd::Spec sp = cd::parse(spec, bucket, stochastic);
  check_payload(payload);
  check_f32(local, "local");
  check_offset(off);
  int64_t n = local.numel();
  at::Tensor out = payload_out(out_opt, (int64_t)cd::encoded_bytes(sp, n));
  {
    py::gil_scoped_release nogil;
    cd::decode_add_encode(sp, payload.data_ptr<uint8_t>(), payload.numel(), local.data_ptr<float>(), n, off,
                          key_of(seed, seq, dec_stream), key_of(seed, seq, enc_stream), out.data_ptr<uint8_t>());
  }
  return out;
}

std::tuple<at::Tensor, bool> encode_feedback(const std::string& spec, const at::Tensor& x, at::Tensor& r, uint64_t seed,
                                             uint32_t seq, uint32_t stream, int64_t off, int64_t bucket,
                                             bool stochastic) {
  cd::Spec sp = cd::parse(spec, bucket, stochastic);
  pyargs::check_feedback_args(kModule, x, r, false);
  check_offset(off);
  int64_t n = x.numel();
  at::Tensor out = at::empty({(int64_t)cd::encoded_bytes(sp, n)}, at::kByte);
  bool finite;
  {
    py::gil_scoped_release nogil;
    finite = cd::encode_feedback(sp, x.data_ptr<float>(), r.data_ptr<float>(), n, off, key_of(seed, seq, stream),
                                 out.data_ptr<uint8_t>());
  }
  return {out, finite};
}

std::tuple<at::Tensor, bool> residual(const std::string& spec, const at::Tensor& payload, const at::Tensor& x,
                                      uint64_t seed, uint32_t seq, uint32_t stream, int64_t off, int64_t bucket) {
  cd::Spec sp = cd::parse(spec, bucket, true);
  check_payload(payload);
  check_f32(x, "x");
  check_offset(off);
  at::Tensor r = at::empty_like(x);
  bool finite;
  {
    py::gil_scoped_release nogil;
    finite = cd::residual(sp, payload.data_ptr<uint8_t>(), payload.numel(), x.data_ptr<float>(), x.numel(), off,
                          key_of(seed, seq, stream), r.data_ptr<float>());
  }
  return {r, finite};
}

at::Tensor topk_feedback(const std::string& spec, at::Tensor& x, at::Tensor& r) {
  const cd::Spec sp = pyargs::topk_spec(kModule, spec);
  pyargs::check_feedback_args(kModule, x, r, false);
  int64_t n = x.numel();
  at::Tensor out = at::empty({(int64_t)cd::encoded_bytes(sp, n)}, at::kByte);
  {
    py::gil_scoped_release nogil;
    cd::topk_feedback(sp, x.data_ptr<float>(), r.data_ptr<float>(), n, out.data_ptr<uint8_t>());
  }
  return out;
}

}  // namespace

void bind_codec(py::module_& m) {
  py::module_ c = m.def_submodule("codec", "ringzip codec kernels (CPU); see docs/wire-format.md");
  using namespace py::literals;
  c.def("encode", &encode, "spec"_a, "x"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize, "stochastic"_a = true, "out"_a = py::none(),
        "Encode x (float32/float16/bfloat16, contiguous) -> uint8 payload (into `out` when given).");
  c.def("decode", &decode, "spec"_a, "payload"_a, "n"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize, "Decode a payload of n elements -> float32 tensor.");
  c.def("decode_accumulate", &decode_accumulate, "spec"_a, "payload"_a, "acc"_a, "seed"_a, "seq"_a, "stream"_a,
        "elem_offset"_a = 0, "bucket"_a = cd::kBucketSize,
        "acc += decode(payload), acc float32 contiguous (in place).");
  c.def("decode_add_encode", &decode_add_encode, "spec"_a, "payload"_a, "local"_a, "seed"_a, "seq"_a, "dec_stream"_a,
        "enc_stream"_a, "elem_offset"_a = 0, "bucket"_a = cd::kBucketSize, "stochastic"_a = true, "out"_a = py::none(),
        "encode(decode(payload) + local), keys (seed, seq, dec_stream) and (seed, seq, enc_stream).");
  c.def("encode_feedback", &encode_feedback, "spec"_a, "x"_a, "r"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize, "stochastic"_a = true,
        "Error feedback on an encode: payload = encode(x + r), then r = x + r - decode(payload) in place; "
        "returns (payload, whether r is finite).");
  c.def("residual", &residual, "spec"_a, "payload"_a, "x"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize,
        "Error feedback: r = x - decode(payload), payload being x's encoding; returns (r, whether r is known "
        "to be finite).");
  c.def("topk_feedback", &topk_feedback, "spec"_a, "x"_a, "r"_a,
        "Top-k with error feedback in one pass (in place): r += x, x = 0, payload = encode(r), r -= decode(payload).");
  c.def(
      "encoded_bytes",
      [](const std::string& spec, int64_t n, int64_t bucket) {
        if (n < 0) bad("n must be >= 0");
        return cd::encoded_bytes(cd::parse(spec, bucket, true), n);
      },
      "spec"_a, "n"_a, "bucket"_a = cd::kBucketSize);
  c.def(
      "k_for", [](const std::string& spec, int64_t n) { return cd::k_for(cd::parse(spec, cd::kBucketSize, true), n); },
      "spec"_a, "n"_a);
  c.def(
      "biased",
      [](const std::string& spec, bool stochastic) { return cd::biased(cd::parse(spec, cd::kBucketSize, stochastic)); },
      "spec"_a, "stochastic"_a = true);
  c.def("name", [](const std::string& spec) { return cd::name(cd::parse(spec, cd::kBucketSize, true)); }, "spec"_a);
  c.def(
      "quant_kernels", [] { return std::string(cd::quant_kernels()); },
      "The fused q8/q4/q2 kernels in use: 'avx512', 'avx2' or 'portable' (RINGZIP_QUANT_KERNELS picks one).");
  // Version of the codecs' bits (codec/codec.h): 2 = one Philox byte of dither per element.
  c.attr("codec_version") = cd::kCodecVersion;
}

}  // namespace ringzip
