#include "backend/tensors.h"

#include "common/check.h"

namespace ringzip {

DType to_dtype(at::ScalarType t, const char* op) {
  switch (t) {
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kChar: return DType::I8;
    case at::kByte: return DType::U8;
    case at::kInt: return DType::I32;
    case at::kLong: return DType::I64;
    case at::kBool: return DType::Bool;
    default:
      RZ_CHECK_TYPE(false, op, " does not support dtype ", t,
                    " (supported: float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool)");
  }
}

Reduction to_reduction(const c10d::ReduceOp& op, DType t, int world, const char* name) {
  const bool fp = is_floating(t);
  const bool integral = !fp;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return {RedOp::Sum};
    case c10d::ReduceOp::PRODUCT: return {RedOp::Prod};
    case c10d::ReduceOp::MIN: return {RedOp::Min};
    case c10d::ReduceOp::MAX: return {RedOp::Max};
    case c10d::ReduceOp::AVG:
      RZ_CHECK_TYPE(fp, name, " with ReduceOp.AVG needs a floating dtype, got ", dtype_name(t));
      return {RedOp::Sum, 1.0, 1.0 / world};
    case c10d::ReduceOp::PREMUL_SUM: {
      RZ_CHECK_TYPE(fp, name, " with PREMUL_SUM needs a floating dtype, got ", dtype_name(t));
      auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>  // the name torch 2.11 .. 2.14 all have
          (op.supplement_.get());
      RZ_CHECK_VALUE(sup != nullptr, name, ": PREMUL_SUM without a factor");
      double f = sup->tensor_factor.defined() ? sup->tensor_factor.item<double>() : sup->double_factor;
      return {RedOp::Sum, f, 1.0};
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      RZ_CHECK_TYPE(integral, name, " with bitwise ReduceOp needs an integer or bool dtype, got ", dtype_name(t));
      return {op.op_ == c10d::ReduceOp::BAND ? RedOp::BAnd : op.op_ == c10d::ReduceOp::BOR ? RedOp::BOr : RedOp::BXor};
    default: RZ_CHECK_VALUE(false, name, " does not support reduce op ", static_cast<int>(op.op_));
  }
}

static bool usable_in_place(const at::Tensor& t, c10::Device where) { return t.device() == where && t.is_contiguous(); }

Staged Staged::in(const at::Tensor& t, c10::Device where) {
  if (usable_in_place(t, where)) return {t, t};
  return {t, copy(t, where)};
}

Staged Staged::out(const at::Tensor& t, c10::Device where) {
  if (usable_in_place(t, where)) return {t, t};
  return {t, at::empty(t.sizes(), t.options().device(where))};
}

at::Tensor Staged::copy(const at::Tensor& t, c10::Device where, std::optional<at::ScalarType> as) {
  return t.to(where, as.value_or(t.scalar_type()), /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
}

at::Tensor Staged::unaliased(const at::Tensor& in, const at::Tensor& out, c10::Device where) {
  return in.is_alias_of(out) ? copy(in, where) : Staged::in(in, where).work;
}

Buf buf_of(const at::Tensor& t) {
  return {t.data_ptr(), static_cast<size_t>(t.numel()), to_dtype(t.scalar_type(), "ringzip")};
}

Buf Staged::buf() const { return buf_of(work); }

void Staged::finish() const {
  if (!work.is_same(user)) user.copy_(work);
}

void check_single(const std::vector<at::Tensor>& ts, const char* op) {
  RZ_CHECK_VALUE(ts.size() == 1, op, " takes exactly one tensor per process, got ", ts.size());
  const auto& t = ts[0];
  RZ_CHECK_VALUE(t.defined(), op, ": tensor is undefined");
  RZ_CHECK_TYPE(t.device().is_cpu() || t.device().is_cuda(), op, ": tensors must be on cpu or cuda, got ", t.device());
  RZ_CHECK_TYPE(t.layout() == at::kStrided, op,
                ": sparse tensors are not supported (only all_reduce with SUM takes sparse COO tensors)");
  to_dtype(t.scalar_type(), op);
}

void check_device(const at::Tensor& t, const at::Tensor& like, const char* op, const char* what) {
  RZ_CHECK_TYPE(t.device() == like.device(), op, ": ", what, " is on ", t.device(), " but the input is on ",
                like.device());
}

void check_same(const at::Tensor& t, const at::Tensor& like, const char* op, const char* what) {
  check_device(t, like, op, what);
  RZ_CHECK_TYPE(t.scalar_type() == like.scalar_type(), op, ": ", what, " has dtype ", t.scalar_type(),
                " but the input has ", like.scalar_type());
  RZ_CHECK_VALUE(t.numel() == like.numel(), op, ": ", what, " has ", t.numel(), " elements but the input has ",
                 like.numel());
}

void check_rank(int64_t r, int world, const char* op, const char* what) {
  RZ_CHECK_VALUE(r >= 0 && r < world, op, ": invalid ", what, " rank ", r, " (group size ", world, ")");
}

}  // namespace ringzip
