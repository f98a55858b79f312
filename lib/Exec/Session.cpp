//===- Session.cpp - Resident shards and the runs that use them -----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Session.h"

#include <algorithm>
#include <cstdlib>

using namespace shardx;
using namespace shardx::exec;
using shardx::rt::Communicator;
using shardx::rt::Status;

TensorSpec ShardSet::getSpec() const {
  TensorSpec spec;
  spec.globalShape = globalShape;
  spec.shape = globalShape;
  spec.dtype = dtype;
  spec.layout = layout;
  if (layout)
    spec.layoutText = layout->str();
  return spec;
}

static bool sameLayout(const std::optional<Layout> &a,
                       const std::optional<Layout> &b) {
  bool aRep = !a || a->isReplicated(), bRep = !b || b->isReplicated();
  if (aRep || bRep)
    return aRep && bRep;
  return *a == *b;
}

static std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool ShardSet::matches(const TensorSpec &spec, std::string &why) const {
  if (spec.globalShape != globalShape) {
    why = "global shape " + shapeText(globalShape) + ", expected " +
          shapeText(spec.globalShape);
    return false;
  }
  if (spec.dtype != dtype) {
    why = std::string("dtype ") + rt::stringifyDType(dtype) + ", expected " +
          rt::stringifyDType(spec.dtype);
    return false;
  }
  if (!sameLayout(layout, spec.layout)) {
    why = "layout [" + (layout ? layout->str() : std::string("R")) +
          "], expected [" +
          (spec.layout ? spec.layout->str() : std::string("R")) + "]";
    return false;
  }
  return true;
}

ShardSet shardx::exec::scatterShards(const HostTensor &global,
                                     const std::optional<Layout> &layout,
                                     const std::vector<int64_t> &meshShape) {
  ShardSet set;
  set.meshShape = meshShape;
  set.globalShape = global.shape;
  set.dtype = global.dtype;
  set.layout = layout;
  std::vector<std::vector<int64_t>> coords = allMeshCoords(meshShape);
  if (!layout || layout->isReplicated()) {
    auto shared = std::make_shared<const HostTensor>(global);
    set.locals.assign(coords.size(), shared);
    return set;
  }
  TensorSpec spec = set.getSpec();
  for (const std::vector<int64_t> &c : coords)
    set.locals.push_back(std::make_shared<const HostTensor>(
        scatter(global, spec, meshShape, c)));
  return set;
}

HostTensor shardx::exec::gatherShards(const ShardSet &shards,
                                      std::string &error) {
  if (!shards.layout || shards.layout->isReplicated())
    return *onHost(shards.locals.at(0));
  std::vector<HostTensor> locals;
  locals.reserve(shards.locals.size());
  for (const auto &l : shards.locals)
    locals.push_back(*onHost(l));
  return assemble(locals, shards.getSpec(), shards.meshShape, error);
}

Session::Session(std::vector<int64_t> meshShape, double timeoutSeconds,
                 RankWorld world)
    : meshShape(meshShape),
      threads(std::make_unique<RankThreads>(std::move(meshShape),
                                            timeoutSeconds, std::move(world))) {
  for (int64_t n : this->meshShape)
    size *= n;
}

Session::Session(std::unique_ptr<rt::Communicator> communicator)
    : meshShape(communicator->getMeshShape()), comm(std::move(communicator)),
      processMode(true) {
  for (int64_t n : meshShape)
    size *= n;
}

Session::Session(std::unique_ptr<rt::Communicator> communicator,
                 std::unique_ptr<rt::Communicator> hostCommunicator)
    : Session(std::move(communicator)) {
  hostComm = std::move(hostCommunicator);
}

Session::~Session() {
  if (threads)
    threads->stop();
}

int64_t Session::getProcessRank() const {
  return processMode && comm ? comm->getRank() : -1;
}

ShardSet Session::scatter(const HostTensor &global,
                          const std::optional<Layout> &layout) const {
  if (!processMode)
    return scatterShards(global, layout, meshShape);
  ShardSet set;
  set.meshShape = meshShape;
  set.globalShape = global.shape;
  set.dtype = global.dtype;
  set.layout = layout;
  set.locals.assign(size, nullptr);
  int64_t rank = getProcessRank();
  if (rank < 0)
    return set;
  if (!layout || layout->isReplicated())
    set.locals[rank] = std::make_shared<const HostTensor>(global);
  else
    set.locals[rank] = std::make_shared<const HostTensor>(exec::scatter(
        global, set.getSpec(), meshShape, allMeshCoords(meshShape)[rank]));
  return set;
}

Status Session::gather(const ShardSet &shards, HostTensor &global) {
  if (!processMode) {
    std::string error;
    global = gatherShards(shards, error);
    return error.empty() ? Status::ok() : Status::error(error);
  }
  int64_t rank = getProcessRank();
  if (rank < 0 || shards.locals.size() != static_cast<size_t>(size) ||
      !shards.locals[rank])
    return Status::error("this process holds no shard of the tensor");
  std::shared_ptr<const HostTensor> local = onHost(shards.locals[rank]);
  if (!shards.layout || shards.layout->isReplicated()) {
    global = *local;
    return Status::ok();
  }
  return gatherOnCommunicator(*local, shards.getSpec(),
                              hostComm ? *hostComm : *comm, global);
}

void Session::close() {
  if (threads)
    threads->stop();
  hostComm.reset();
  comm.reset();
}

std::vector<Status>
Session::runOnRanks(const std::function<Status(Communicator &)> &body) {
  if (threads)
    return threads->run(body);
  // This process's rank, on the calling thread; a failed collective ends the
  // whole job with a message naming the rank (the mpi backend).
  std::vector<Status> result(size, Status::ok());
  if (!comm) {
    result[0] = Status::error("the session was closed");
    return result;
  }
  result[comm->getRank()] = body(*comm);
  return result;
}

/// The rank whose own failure stopped the run: its message ("rank R:
/// cause") names no other rank, while its peers' failed collectives quote
/// it.
static Status rootCause(const std::vector<Status> &statuses) {
  const Status *first = nullptr;
  for (size_t r = 0; r < statuses.size(); ++r) {
    const Status &s = statuses[r];
    if (s)
      continue;
    if (!first)
      first = &s;
    const std::string &m = s.message();
    std::string prefix = "rank " + std::to_string(r) + ": ";
    std::string cause =
        m.compare(0, prefix.size(), prefix) == 0 ? m.substr(prefix.size()) : m;
    if (cause.find("rank ") == std::string::npos)
      return Status::error("rank " + std::to_string(r) + " failed: " + cause);
  }
  return first ? Status::error(first->message()) : Status::ok();
}

Status Session::run(const Artifact &artifact, const EntryPoint &entry,
                    const std::vector<const ShardSet *> &inputs,
                    std::vector<ShardSet> &outputs) {
  // Nothing is donated, so nothing is written.
  std::vector<ShardSet *> mutableInputs;
  mutableInputs.reserve(inputs.size());
  for (const ShardSet *in : inputs)
    mutableInputs.push_back(const_cast<ShardSet *>(in));
  return run(artifact, entry, mutableInputs, outputs, {});
}

Status Session::run(const Artifact &artifact, const EntryPoint &entry,
                    const std::vector<ShardSet *> &inputs,
                    std::vector<ShardSet> &outputs,
                    const std::vector<int64_t> &donatedInputOf,
                    bool inputsChecked) {
  if (artifact.getMeshShape() != meshShape &&
      !(size == 1 && artifact.getMeshShape() == std::vector<int64_t>{1}))
    return Status::error("the artifact's mesh " +
                         shapeText(artifact.getMeshShape()) +
                         " is not the session's " + shapeText(meshShape));
  if (inputs.size() != entry.inputs.size())
    return Status::error(entry.name + " takes " +
                         std::to_string(entry.inputs.size()) + " inputs, got " +
                         std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string why;
    if (inputs[i]->donated)
      return Status::error("input " + std::to_string(i) +
                           " was donated to an earlier run: its buffers "
                           "belong to that run's output");
    if (inputs[i]->locals.size() != static_cast<size_t>(size))
      return Status::error("input " + std::to_string(i) + " has " +
                           std::to_string(inputs[i]->locals.size()) +
                           " shards for " + std::to_string(size) + " ranks");
    for (int64_t r = 0; r < size; ++r)
      if (holds(r) && !inputs[i]->locals[r])
        return Status::error("input " + std::to_string(i) +
                             " has no shard for rank " + std::to_string(r) +
                             " in this process");
    if (!inputsChecked && !inputs[i]->matches(entry.inputs[i], why))
      return Status::error("input " + std::to_string(i) + " of " + entry.name +
                           ": " + why);
  }
  size_t numOutputs = entry.outputs.size();
  std::vector<ShardSet *> donors(numOutputs);
  for (size_t o = 0; o < numOutputs; ++o) {
    std::string why;
    if (o < donatedInputOf.size() && donatedInputOf[o] >= 0 &&
        donatedInputOf[o] < static_cast<int64_t>(inputs.size()) &&
        inputs[donatedInputOf[o]]->matches(entry.outputs[o], why))
      donors[o] = inputs[donatedInputOf[o]];
  }
  int64_t ranksHere = size;
  if (processMode) {
    // The ranks sharing this machine: the launcher's local size (Open MPI,
    // MPICH/Hydra), else assumed to be one.
    ranksHere = 1;
    for (const char *var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char *env = std::getenv(var)) {
        ranksHere = std::max(1, std::atoi(env));
        break;
      }
  }
  artifact.setComputeThreads(computeThreadsPerRank(ranksHere));
  std::vector<RawOutputs> raws(size);
  std::vector<std::vector<HostTensor>> localOutputs(size);
  // A donated result stays in the program's buffer until every rank has
  // succeeded, so a failure leaves the donated inputs as they were.
  // A GPU session's results stay on the device, in the buffers the
  // program allocated; a donated input's buffers then just go back to the
  // allocator.
  bool onDevice = deviceResident && artifact.isCuda();
  auto deferred = [&](int64_t r, size_t o) {
    return !onDevice && donors[o] && !raws[r].aliasesInput(o);
  };
  std::vector<Status> statuses = runOnRanks([&](Communicator &comm) {
    int64_t r = comm.getRank();
    std::vector<const HostTensor *> locals;
    locals.reserve(inputs.size());
    for (const ShardSet *in : inputs)
      locals.push_back(in->locals[r].get());
    localOutputs[r].resize(numOutputs);
    if (onDevice) {
      if (Status s = artifact.callOnDevice(entry, comm, locals, raws[r]); !s)
        return s;
      for (size_t o = 0; o < numOutputs; ++o)
        localOutputs[r][o] = raws[r].takeOut(o);
      return Status::ok();
    }
    if (Status s = artifact.call(entry, comm, locals, raws[r]); !s)
      return s;
    for (size_t o = 0; o < numOutputs; ++o)
      if (!deferred(r, o))
        raws[r].copyOut(o, localOutputs[r][o]);
    return Status::ok();
  });
  if (Status s = rootCause(statuses); !s)
    return s;
  outputs.clear();
  outputs.reserve(numOutputs);
  for (size_t o = 0; o < numOutputs; ++o) {
    const TensorSpec &spec = entry.outputs[o];
    ShardSet set;
    set.meshShape = meshShape;
    set.globalShape = spec.globalShape;
    set.dtype = spec.dtype;
    set.layout = spec.layout;
    set.locals.reserve(size);
    for (int64_t r = 0; r < size; ++r) {
      if (!holds(r)) {
        set.locals.push_back(nullptr);
        continue;
      }
      if (!deferred(r, o)) {
        set.locals.push_back(
            std::make_shared<const HostTensor>(std::move(localOutputs[r][o])));
        continue;
      }
      std::shared_ptr<const HostTensor> &buffer = donors[o]->locals[r];
      if (buffer && buffer.use_count() == 1) {
        // Only this ShardSet holds it: the result goes in place.
        raws[r].copyOut(o, const_cast<HostTensor &>(*buffer));
        set.locals.push_back(std::move(buffer));
      } else {
        HostTensor t;
        raws[r].copyOut(o, t);
        set.locals.push_back(std::make_shared<const HostTensor>(std::move(t)));
      }
    }
    outputs.push_back(std::move(set));
  }
  for (ShardSet *donor : donors)
    if (donor) {
      donor->locals.clear();
      donor->donated = true;
    }
  return Status::ok();
}
