//===- ExecDeviceInputsTest.cpp - Host calls given device tensors ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// A GPU session's resident shards can reach a host artifact (a checkpoint,
// a CPU program in the same job): Artifact::call copies them to the host
// first. These tests run that path on a CPU with tensors whose "device"
// memory is host memory behind DeviceData (the executor only uses its
// address, owner and copy function), on a real compiled artifact.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Executor.h"
#include "shardx/Runtime/Communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

using namespace shardx;
using namespace shardx::exec;

namespace {

void hostCopy(void *dst, const void *src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

HostTensor deviceTensor(const std::vector<float> &values) {
  std::shared_ptr<float[]> block(new float[values.size()]);
  std::copy(values.begin(), values.end(), block.get());
  auto device = std::make_shared<DeviceData>();
  device->address = block.get();
  device->owner = block;
  device->copy = hostCopy;
  HostTensor t;
  t.shape = {static_cast<int64_t>(values.size())};
  t.device = std::move(device);
  return t;
}

HostTensor hostTensor(const std::vector<float> &values) {
  HostTensor t;
  t.shape = {static_cast<int64_t>(values.size())};
  const char *bytes = reinterpret_cast<const char *>(values.data());
  t.data.assign(bytes, bytes + values.size() * sizeof(float));
  return t;
}

std::vector<float> valuesOf(const HostTensor &t) {
  EXPECT_FALSE(t.onDevice());
  std::vector<float> v(static_cast<size_t>(t.numElements()));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
  return v;
}

/// `f(a, b) = (a, a + b)` over 16 floats, compiled for the CPU. (The
/// compiler copies a returned argument at the return, so no result is an
/// input's buffer; RawOutputs still keeps the host copies of device inputs
/// with the results for artifacts that return one.)
std::unique_ptr<Artifact> compileReturnsArgument() {
  // One file per test case: lit runs the cases as concurrent processes.
  std::string base =
      ::testing::TempDir() + "/exec_device_inputs_" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::string source = base + ".mlir", so = base + ".so";
  std::ofstream(source) << R"(
func.func @f(%a: tensor<16xf32>, %b: tensor<16xf32>)
    -> (tensor<16xf32>, tensor<16xf32>) {
  %c = arith.addf %a, %b : tensor<16xf32>
  return %a, %c : tensor<16xf32>, tensor<16xf32>
}
)";
  std::string command =
      std::string(SHARDX_COMPILE) + " " + source + " -o " + so;
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "failed: " << command;
    return nullptr;
  }
  std::string error;
  auto artifact = Artifact::load(so, error);
  EXPECT_TRUE(artifact) << error;
  return artifact;
}

std::vector<float> iota(float start) {
  std::vector<float> v(16);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = start + static_cast<float>(i);
  return v;
}

/// f's second result for a = iota(1), b = iota(100).
std::vector<float> sumOfInputs() {
  std::vector<float> a = iota(1), b = iota(100);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] += b[i];
  return a;
}

/// Each test case's artifact and its entry `f`.
class ExecDeviceInputs : public ::testing::Test {
protected:
  void SetUp() override {
    artifact = compileReturnsArgument();
    ASSERT_TRUE(artifact);
    entry = artifact->lookup("f");
    ASSERT_NE(entry, nullptr);
  }
  std::unique_ptr<Artifact> artifact;
  const EntryPoint *entry = nullptr;
};

} // namespace

TEST_F(ExecDeviceInputs, HostCallOfADeviceInputItReturns) {
  HostTensor a = deviceTensor(iota(1)), b = hostTensor(iota(100));
  std::vector<HostTensor> outputs(2);
  auto statuses = rt::runThreads({1}, [&](rt::Communicator &comm) {
    RawOutputs raw;
    rt::Status s = artifact->call(*entry, comm, {&a, &b}, raw);
    if (!s)
      return s;
    // `a` was copied to the host for the call; the results are read
    // after the call returned.
    for (size_t o = 0; o < raw.size(); ++o)
      raw.copyOut(o, outputs[o]);
    return rt::Status::ok();
  });
  ASSERT_EQ(statuses.size(), 1u);
  ASSERT_TRUE(statuses[0]) << statuses[0].message();
  EXPECT_EQ(valuesOf(outputs[0]), iota(1));
  EXPECT_EQ(valuesOf(outputs[1]), sumOfInputs());
  // The device tensor itself is untouched.
  EXPECT_TRUE(a.onDevice());
}

TEST_F(ExecDeviceInputs, HostResultIntoADeviceDonor) {
  HostTensor a = hostTensor(iota(1)), b = hostTensor(iota(100));
  // A donated tensor whose elements were in device memory: a host result
  // copied into it replaces them, and it must stop reporting the device
  // buffer.
  HostTensor donor = deviceTensor(iota(-50));
  auto statuses = rt::runThreads({1}, [&](rt::Communicator &comm) {
    RawOutputs raw;
    rt::Status s = artifact->call(*entry, comm, {&a, &b}, raw);
    if (s)
      raw.copyOut(1, donor);
    return s;
  });
  ASSERT_TRUE(statuses.at(0)) << statuses[0].message();
  ASSERT_FALSE(donor.onDevice());
  EXPECT_EQ(valuesOf(donor), sumOfInputs());
}
