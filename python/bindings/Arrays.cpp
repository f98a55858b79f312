//===- Arrays.cpp - Python arrays as host tensors -------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Binding.h"

#include <cstring>

using namespace shardx;
using namespace shardx::binding;

/// The DLPack type of `type`'s arrays (the DType table's sizes and kinds).
nb::dlpack::dtype binding::dlpackType(rt::DType type) {
  using nb::dlpack::dtype_code;
  dtype_code code = type == rt::DType::I1      ? dtype_code::Bool
                    : type == rt::DType::BF16  ? dtype_code::Bfloat
                    : rt::isFloat(type)        ? dtype_code::Float
                                               : dtype_code::Int;
  return {static_cast<uint8_t>(code),
          static_cast<uint8_t>(8 * rt::dtypeSize(type)), 1};
}

/// The element type of an array of DLPack type `t`, if ShardX has it.
std::optional<rt::DType> binding::dtypeOf(nb::dlpack::dtype t) {
  for (const rt::DTypeInfo &info : rt::kDTypes)
    if (info.type != rt::DType::Index && dlpackType(info.type) == t)
      return info.type;
  return std::nullopt;
}

std::string binding::dtypeName(nb::dlpack::dtype t) {
  std::optional<rt::DType> type = dtypeOf(t);
  return type ? rt::stringifyDType(*type) : "unsupported";
}

/// A dtype argument from Python (an MLIR name such as "bf16").
rt::DType binding::parseDTypeArg(const std::string &name) {
  std::optional<rt::DType> type = rt::parseDType(name);
  if (!type)
    throw std::invalid_argument("unsupported dtype '" + name + "'");
  return *type;
}


HostTensor binding::hostTensorOf(const AnyArray &a, rt::DType dtype) {
  HostTensor t;
  t.dtype = dtype;
  if (dtypeOf(a.dtype()) != dtype)
    throw std::invalid_argument("array dtype " + dtypeName(a.dtype()) +
                                " is not " + rt::stringifyDType(dtype));
  for (size_t d = 0; d < a.ndim(); ++d)
    t.shape.push_back(static_cast<int64_t>(a.shape(d)));
  t.data.resize(a.nbytes());
  if (a.nbytes())
    std::memcpy(t.data.data(), a.data(), a.nbytes());
  return t;
}

/// The same with the dtype named (empty: the array's).
HostTensor binding::hostTensorOf(const AnyArray &a, const std::string &dtype) {
  std::optional<rt::DType> type =
      dtype.empty() ? dtypeOf(a.dtype()) : rt::parseDType(dtype);
  if (!type)
    throw std::invalid_argument("unsupported array dtype");
  return hostTensorOf(a, *type);
}

