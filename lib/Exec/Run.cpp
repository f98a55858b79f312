//===- Run.cpp - Run an artifact on every rank of its mesh ----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

using namespace shardx;
using namespace shardx::exec;
using shardx::rt::Communicator;
using shardx::rt::DType;
using shardx::rt::Status;

int shardx::exec::computeThreadsPerRank(int64_t ranks) {
  if (const char *env = std::getenv("SHARDX_NUM_THREADS"))
    return std::max(1, std::atoi(env));
  if (std::getenv("OPENBLAS_NUM_THREADS"))
    return 0;
  // Read once: glibc reads /sys on every call, which a run per training
  // step (shardx.compile) would pay each time.
  static const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, cores / std::max<int64_t>(1, ranks)));
}

Status shardx::exec::checkIndexCode(const EntryPoint &entry,
                                    const std::vector<HostTensor> &outputs) {
  if (entry.checkOutput < 0)
    return Status::ok();
  if (static_cast<size_t>(entry.checkOutput) >= outputs.size())
    return Status::error(entry.name + " returned " +
                         std::to_string(outputs.size()) +
                         " outputs, and its check code is output " +
                         std::to_string(entry.checkOutput));
  std::shared_ptr<const HostTensor> code = onHost(std::make_shared<HostTensor>(
      outputs[static_cast<size_t>(entry.checkOutput)]));
  if (code->dtype != DType::I64 || code->numElements() != 1)
    return Status::error(entry.name + "'s check code (output " +
                         std::to_string(entry.checkOutput) +
                         ") is not an i64 scalar");
  int64_t value = 0;
  std::memcpy(&value, code->data.data(), sizeof(value));
  std::string failed = describeFailedCheck(entry, value);
  return failed.empty() ? Status::ok() : Status::error(failed);
}

void shardx::exec::dropIndexCode(const EntryPoint &entry,
                                 std::vector<HostTensor> &outputs) {
  if (entry.checkOutput >= 0 &&
      static_cast<size_t>(entry.checkOutput) < outputs.size())
    outputs.erase(outputs.begin() + entry.checkOutput);
}

Status shardx::exec::runThreaded(const Artifact &artifact,
                                 const EntryPoint &entry,
                                 const std::vector<HostTensor> &globalInputs,
                                 std::vector<HostTensor> &globalOutputs,
                                 double timeoutSeconds, double *seconds,
                                 const RankWorld &world,
                                 double *blockedSeconds) {
  const std::vector<int64_t> &mesh = artifact.getMeshShape();
  std::vector<std::vector<int64_t>> coords = allMeshCoords(mesh);
  std::vector<std::vector<HostTensor>> outs(coords.size());
  std::vector<double> times(coords.size(), 0), blocked(coords.size(), 0);
  artifact.setComputeThreads(
      computeThreadsPerRank(static_cast<int64_t>(coords.size())));
  std::vector<Status> statuses = world(
      mesh,
      [&](Communicator &comm) -> Status {
        std::vector<HostTensor> local;
        for (size_t i = 0; i < entry.inputs.size(); ++i)
          local.push_back(
              scatter(globalInputs[i], entry.inputs[i], mesh, comm.getCoords()));
        auto start = std::chrono::steady_clock::now();
        comm.resetWaitSeconds();
        Status s = artifact.run(entry, comm, local, outs[comm.getRank()]);
        times[comm.getRank()] = std::chrono::duration<double>(
                                    std::chrono::steady_clock::now() - start)
                                    .count();
        blocked[comm.getRank()] = comm.getWaitSeconds();
        return s;
      },
      timeoutSeconds);
  // Every rank's error, each distinct message once (a world that cannot
  // start fails every rank alike).
  std::string errors;
  std::set<std::string> seen;
  for (size_t r = 0; r < statuses.size(); ++r)
    if (!statuses[r] && seen.insert(statuses[r].message()).second)
      errors += (errors.empty() ? "" : "\n") + statuses[r].message();
  if (!errors.empty())
    return Status::error(errors);
  if (seconds)
    *seconds = *std::max_element(times.begin(), times.end());
  if (blockedSeconds)
    *blockedSeconds = std::accumulate(blocked.begin(), blocked.end(), 0.0) /
                      static_cast<double>(blocked.size());
  globalOutputs.clear();
  for (size_t o = 0; o < entry.outputs.size(); ++o) {
    std::vector<HostTensor> locals;
    for (auto &r : outs)
      locals.push_back(r[o]);
    std::string error;
    globalOutputs.push_back(assemble(locals, entry.outputs[o], mesh, error));
    if (!error.empty())
      return Status::error(error);
  }
  return Status::ok();
}

Status shardx::exec::runOnCommunicator(
    const Artifact &artifact, const EntryPoint &entry, Communicator &comm,
    const std::vector<HostTensor> &globalInputs,
    std::vector<HostTensor> &globalOutputs, double *seconds,
    double *blockedSeconds) {
  const std::vector<int64_t> &mesh = artifact.getMeshShape();
  std::vector<HostTensor> local, localOut;
  // One process per rank: the ranks sharing this machine are the launcher's
  // local size (Open MPI, MPICH/Hydra), else assumed to be one.
  int64_t localRanks = 1;
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char *env = std::getenv(var)) {
      localRanks = std::max(1, std::atoi(env));
      break;
    }
  artifact.setComputeThreads(computeThreadsPerRank(localRanks));
  for (size_t i = 0; i < entry.inputs.size(); ++i)
    local.push_back(
        scatter(globalInputs[i], entry.inputs[i], mesh, comm.getCoords()));
  auto start = std::chrono::steady_clock::now();
  comm.resetWaitSeconds();
  Status s = artifact.run(entry, comm, local, localOut);
  if (!s)
    return s;
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             start)
                   .count();
  if (blockedSeconds) {
    // The mean over ranks, like runThreaded's.
    std::vector<int64_t> all(mesh.size());
    std::iota(all.begin(), all.end(), 0);
    double mine = comm.getWaitSeconds(), sum = 0;
    if (Status r = comm.allReduce(&mine, &sum, 1, rt::DType::F64,
                                  ReduceOp::Sum, all);
        !r)
      return r;
    *blockedSeconds = sum / static_cast<double>(comm.getSize());
  }
  globalOutputs.assign(entry.outputs.size(), HostTensor());
  for (size_t o = 0; o < entry.outputs.size(); ++o)
    if (Status g = gatherOnCommunicator(localOut[o], entry.outputs[o], comm,
                                        globalOutputs[o]);
        !g)
      return g;
  return Status::ok();
}

Status shardx::exec::gatherOnCommunicator(const HostTensor &local,
                                          const TensorSpec &spec,
                                          Communicator &comm,
                                          HostTensor &global) {
  const std::vector<int64_t> &mesh = comm.getMeshShape();
  std::vector<std::vector<int64_t>> coords = allMeshCoords(mesh);
  std::vector<int64_t> allAxes;
  for (size_t a = 0; a < mesh.size(); ++a)
    allAxes.push_back(static_cast<int64_t>(a));
  if (!rt::isCollectiveType(spec.dtype))
    return Status::error(std::string("cannot gather ") +
                         rt::stringifyDType(spec.dtype) + " results");
  std::vector<size_t> counts;
  std::vector<HostTensor> locals(coords.size());
  for (size_t r = 0; r < coords.size(); ++r) {
    locals[r].dtype = spec.dtype;
    locals[r].shape =
        spec.layout
            ? spec.layout->getLocalShard(mesh, spec.globalShape, coords[r])
                  .shape
            : spec.globalShape;
    counts.push_back(locals[r].numElements());
  }
  size_t total = 0;
  for (size_t c : counts)
    total += c;
  std::vector<char> all(total * rt::dtypeSize(spec.dtype) + 1);
  Status g =
      comm.allGather(local.data.data(), all.data(), counts, spec.dtype,
                     allAxes);
  if (!g)
    return g;
  size_t off = 0;
  for (size_t r = 0; r < coords.size(); ++r) {
    size_t bytes = counts[r] * rt::dtypeSize(spec.dtype);
    locals[r].data.assign(all.begin() + off, all.begin() + off + bytes);
    off += bytes;
  }
  std::string error;
  global = assemble(locals, spec, mesh, error);
  if (!error.empty())
    return Status::error(error);
  return Status::ok();
}
