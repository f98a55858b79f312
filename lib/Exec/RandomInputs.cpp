//===- RandomInputs.cpp - Random inputs and their domains -----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "Elements.h"
#include "shardx/Exec/Executor.h"

#include <algorithm>
#include <random>

using namespace shardx;
using namespace shardx::exec;
using namespace shardx::exec::detail;

namespace {

/// The random-input policy for PyTorch optimizer state, by the key its
/// optimizers give each state tensor in `state[param]` (torch/optim/*.py;
/// the importer marks each such argument `torch.state = "<key>"`). A state
/// whose square root or logarithm the step takes must not be drawn
/// negative; a step counter is a whole number. Keys not listed: Any.
struct TorchStateDomain {
  const char *key;
  InputDomain domain;
};
constexpr TorchStateDomain kTorchOptimizerStateDomains[] = {
    {"acc_delta", InputDomain::NonNegative},      // Adadelta: mean of update^2
    {"exp_avg_sq", InputDomain::NonNegative},     // Adam, AdamW, RAdam: grad^2
    {"exp_inf", InputDomain::NonNegative},        // Adamax: max of |grad|
    {"max_exp_avg_sq", InputDomain::NonNegative}, // Adam(amsgrad)
    {"square_avg", InputDomain::NonNegative},     // RMSprop, Adadelta
    {"step", InputDomain::Count},                 // Adam, AdamW, RAdam, Adagrad
    {"sum", InputDomain::NonNegative},            // Adagrad: sum of grad^2
};

} // namespace

InputDomain shardx::exec::inputDomainOfTorchState(const std::string &state) {
  for (const TorchStateDomain &entry : kTorchOptimizerStateDomains)
    if (state == entry.key)
      return entry.domain;
  return InputDomain::Any;
}

HostTensor shardx::exec::randomTensor(const std::vector<int64_t> &shape,
                                      DType dtype, uint64_t seed,
                                      int64_t intRange, InputDomain domain) {
  HostTensor t;
  t.shape = shape;
  t.dtype = dtype;
  size_t es = t.elementSize();
  t.data.resize(t.numElements() * es);
  std::mt19937_64 gen(seed);
  bool isFloat = rt::isFloat(dtype);
  std::uniform_real_distribution<double> real(
      domain == InputDomain::NonNegative ? 0.0 : -1.0, 1.0);
  std::uniform_int_distribution<int64_t> integer(0, std::max<int64_t>(intRange, 1) - 1);
  std::uniform_int_distribution<int64_t> count(1, 100);
  for (int64_t n = 0; n < t.numElements(); ++n) {
    double v = domain == InputDomain::Count ? static_cast<double>(count(gen))
               : isFloat                    ? real(gen)
                                            : static_cast<double>(integer(gen));
    storeFromDouble(t.data.data() + n * es, v, dtype);
  }
  return t;
}
