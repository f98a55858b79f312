//===- Executor.cpp - Run ShardX artifacts on N ranks ---------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Executor.h"
#include "shardx/Layout/LayoutJson.h"
#include "shardx/Runtime/CApi.h"
#include "shardx/Runtime/HalfFloat.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <chrono>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <fstream>
#include <map>
#include <limits>
#include <random>
#include <set>
#include <cstdlib>
#include <thread>
#include <sstream>

using namespace shardx;
using namespace shardx::exec;
using shardx::rt::Communicator;
using shardx::rt::DType;
using shardx::rt::Status;

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

namespace {

template <typename T>
double load(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}

template <typename T>
void store(char *p, double v) {
  T x = static_cast<T>(v);
  std::memcpy(p, &x, sizeof(T));
}

/// A bf16/f16 element's bits.
uint16_t bits16(const char *p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return h;
}

void storeBits16(char *p, uint16_t h) { std::memcpy(p, &h, sizeof(h)); }

double loadAsDouble(const char *p, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return load<float>(p);
  case DType::F64:
    return load<double>(p);
  case DType::I32:
    return load<int32_t>(p);
  case DType::I64:
  case DType::Index:
    return load<int64_t>(p);
  case DType::I16:
    return load<int16_t>(p);
  case DType::I8:
  case DType::I1:
    return load<int8_t>(p);
  case DType::BF16:
    return shardx::rt::bf16ToFloat(bits16(p));
  case DType::F16:
    return shardx::rt::f16ToFloat(bits16(p));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void storeFromDouble(char *p, double v, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return store<float>(p, v);
  case DType::F64:
    return store<double>(p, v);
  case DType::I32:
    return store<int32_t>(p, v);
  case DType::I64:
  case DType::Index:
    return store<int64_t>(p, v);
  case DType::I16:
    return store<int16_t>(p, v);
  case DType::I8:
  case DType::I1:
    return store<int8_t>(p, v);
  case DType::BF16:
    return storeBits16(p, shardx::rt::floatToBf16(static_cast<float>(v)));
  case DType::F16:
    return storeBits16(p, shardx::rt::floatToF16(static_cast<float>(v)));
  }
}

/// Per dim, the global indices a shard holds, in local order.
std::vector<std::vector<int64_t>> globalIndices(const LocalShard &shard) {
  std::vector<std::vector<int64_t>> idx(shard.runs.size());
  for (size_t d = 0; d < shard.runs.size(); ++d)
    for (const Interval &r : shard.runs[d])
      for (int64_t i = 0; i < r.size; ++i)
        idx[d].push_back(r.offset + i);
  return idx;
}

/// Calls fn(localLinear, globalLinear) for every element of a shard.
template <typename Fn>
void forEachElement(const std::vector<std::vector<int64_t>> &idx,
                    const std::vector<int64_t> &globalShape, Fn fn) {
  size_t rank = globalShape.size();
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * globalShape[d + 1];
  for (const auto &v : idx)
    if (v.empty())
      return;
  std::vector<size_t> i(rank, 0);
  int64_t local = 0;
  while (true) {
    int64_t g = 0;
    for (size_t d = 0; d < rank; ++d)
      g += idx[d][i[d]] * strides[d];
    fn(local++, g);
    int64_t d = static_cast<int64_t>(rank) - 1;
    for (; d >= 0; --d) {
      if (++i[d] < idx[d].size())
        break;
      i[d] = 0;
    }
    if (d < 0)
      return;
  }
}

using Json = nlohmann::json;

/// The integers of `obj[key]` (empty when absent).
std::vector<int64_t> ints(const Json &obj, const char *key) {
  std::vector<int64_t> v;
  if (auto it = obj.find(key); it != obj.end() && it->is_array())
    for (const Json &x : *it)
      v.push_back(x.is_number_integer() ? x.get<int64_t>() : -1);
  return v;
}

std::string stringOr(const Json &obj, const char *key, std::string fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool parseSpec(const Json &obj, size_t meshRank, TensorSpec &spec,
               std::string &error) {
  spec.shape = ints(obj, "shape");
  spec.globalShape = ints(obj, "global_shape");
  if (spec.globalShape.empty() && !spec.shape.empty())
    spec.globalShape = spec.shape;
  std::string dtype = stringOr(obj, "dtype", "");
  std::optional<DType> parsed = rt::parseDType(dtype);
  if (!parsed) {
    error = "unsupported element type '" + dtype + "'";
    return false;
  }
  spec.dtype = *parsed;
  auto l = obj.find("layout");
  if (l == obj.end() || !l->is_object())
    return true;
  spec.layoutText = stringOr(*l, "text", "");
  std::optional<Layout> layout = layoutFromJson(*l, error);
  if (!layout) {
    error = "layout " + spec.layoutText + ": " + error;
    return false;
  }
  if (static_cast<size_t>(layout->getMeshRank()) != meshRank) {
    error = "layout " + spec.layoutText + " has " +
            std::to_string(layout->getMeshRank()) +
            " mesh axes, the program's mesh " + std::to_string(meshRank);
    return false;
  }
  spec.layout = std::move(layout);
  return true;
}

/// Reads the program description into `a`; false with `error` set when it
/// is malformed.
bool parseProgramInfo(const char *info, std::vector<int64_t> &meshShape,
                      std::vector<EntryPoint> &entries, std::string &error) {
  Json root = Json::parse(info, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    error = "not valid JSON";
    return false;
  }
  try {
    size_t meshRank = 1;
    if (auto meshes = root.find("meshes");
        meshes != root.end() && meshes->is_array() && !meshes->empty()) {
      meshShape.clear();
      for (const Json &s : meshes->at(0).at("shape"))
        meshShape.push_back(s.get<int64_t>());
      meshRank = meshShape.size();
    }
    for (const Json &f : root.at("functions")) {
      EntryPoint e;
      e.name = stringOr(f, "name", "");
      for (const char *key : {"inputs", "outputs"})
        for (const Json &v : f.at(key)) {
          TensorSpec spec;
          if (!parseSpec(v, meshRank, spec, error)) {
            error = e.name + ": " + error;
            return false;
          }
          (std::string(key) == "inputs" ? e.inputs : e.outputs).push_back(spec);
        }
      entries.push_back(std::move(e));
    }
  } catch (const Json::exception &e) {
    error = e.what();
    return false;
  }
  return true;
}

/// A program allocates its intermediate buffers on every run. glibc serves
/// a block above its mmap threshold (128 KiB, raised on the fly to at most
/// 32 MiB, and not for the heaps of rank threads) with a fresh mapping and
/// unmaps it on free, so every run of a training step page-faults and
/// zeroes each large buffer again: on the MLP train step (hidden 2048, 16
/// MiB weights) that was more time than the step's GEMMs on a rank thread.
/// Buffers up to 32 MiB (glibc's limit for the threshold) come from the
/// heap instead, and freed memory up to 1 GiB stays there for the next run.
/// Once per process; SHARDX_KEEP_FREED_MEMORY=0 leaves malloc as it is.
void keepFreedMemory() {
#if defined(__GLIBC__)
  static const bool done = [] {
    const char *env = std::getenv("SHARDX_KEEP_FREED_MEMORY");
    if (env && std::string(env) == "0")
      return false;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
#endif
}

} // namespace

std::unique_ptr<Artifact> Artifact::load(const std::string &path,
                                         std::string &error) {
  keepFreedMemory();
  // A path, never a library name: dlopen searches the library path for a
  // name without a slash ("m.so"), not the current directory.
  std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  void *handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    error = std::string("cannot load ") + path + ": " + dlerror();
    return nullptr;
  }
  auto *info = static_cast<const char *>(dlsym(handle, "shardx_program_info"));
  auto *invoke = dlsym(handle, "shardx_rt_invoke");
  if (!info || !invoke) {
    error = path + " is not a ShardX artifact (no shardx_program_info)";
    dlclose(handle);
    return nullptr;
  }
  std::unique_ptr<Artifact> a(new Artifact());
  a->path = path;
  a->handle = handle;
  a->invoke = reinterpret_cast<int (*)(void (*)(void **), void **, void *,
                                       char *, int64_t)>(invoke);
  // Absent from artifacts built before the call existed.
  a->setThreads = reinterpret_cast<int (*)(int)>(
      dlsym(handle, "shardx_rt_set_compute_threads"));
  // The buffer cache of CPU artifacts (absent from older ones and from
  // programs that allocate nothing).
  a->freeBuffer =
      reinterpret_cast<void (*)(void *)>(dlsym(handle, "shardx_rt_host_free"));
  a->trimBuffers = reinterpret_cast<void (*)()>(
      dlsym(handle, "shardx_rt_host_cache_trim"));
  if (!a->trimBuffers) // a CUDA artifact: its device blocks
    a->trimBuffers = reinterpret_cast<void (*)()>(
        dlsym(handle, "shardx_rt_cuda_cache_trim"));
  if (!parseProgramInfo(info, a->meshShape, a->entries, error)) {
    error = "bad program description in " + path + ": " + error;
    return nullptr;
  }
  return a;
}

Artifact::~Artifact() {
  // The library stays loaded: threads of the runtime may still be winding
  // down and process exit unloads it anyway. Its cached buffers go back to
  // malloc now (buffers in use are not in the cache).
  if (trimBuffers)
    trimBuffers();
}

void *Artifact::lookupSymbol(const std::string &symbol) const {
  return dlsym(handle, symbol.c_str());
}

const EntryPoint *Artifact::lookup(const std::string &name) const {
  for (const EntryPoint &e : entries)
    if (e.name == name)
      return &e;
  return nullptr;
}

void Artifact::setComputeThreads(int threads) const {
  if (threads > 0 && setThreads)
    setThreads(threads);
}

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

Status Artifact::run(const EntryPoint &entry, Communicator &comm,
                     const std::vector<HostTensor> &localInputs,
                     std::vector<HostTensor> &localOutputs) const {
  std::vector<const HostTensor *> inputs;
  for (const HostTensor &t : localInputs)
    inputs.push_back(&t);
  return run(entry, comm, inputs, localOutputs);
}

Status Artifact::run(const EntryPoint &entry, Communicator &comm,
                     const std::vector<const HostTensor *> &localInputs,
                     std::vector<HostTensor> &localOutputs) const {
  RawOutputs raw;
  if (Status s = call(entry, comm, localInputs, raw); !s)
    return s;
  localOutputs.clear();
  localOutputs.resize(raw.size());
  for (size_t o = 0; o < raw.size(); ++o)
    raw.copyOut(o, localOutputs[o]);
  return Status::ok();
}

Status Artifact::call(const EntryPoint &entry, Communicator &comm,
                      const std::vector<const HostTensor *> &localInputs,
                      RawOutputs &raw) const {
  raw.release();
  if (localInputs.size() != entry.inputs.size())
    return Status::error(entry.name + " takes " +
                         std::to_string(entry.inputs.size()) + " inputs");
  void *fn =
      dlsym(handle, ("shardx_entry_" + entry.name + entrySuffix).c_str());
  if (!fn)
    return Status::error("artifact has no entry point " + entry.name);
  // Inputs are passed in place: the compiler marks every entry argument
  // read-only, so the program never writes them (it copies first if it must).
  std::vector<std::vector<int64_t>> descs;
  std::set<int64_t> inputPtrs;
  static char emptyBuffer[1];
  for (size_t i = 0; i < localInputs.size(); ++i) {
    const HostTensor &t = *localInputs[i];
    const TensorSpec &spec = entry.inputs[i];
    bool shapeOk = t.shape.size() == spec.shape.size();
    for (size_t d = 0; shapeOk && d < t.shape.size(); ++d)
      shapeOk = spec.shape[d] < 0 || spec.shape[d] == t.shape[d];
    if (!shapeOk)
      return Status::error("input " + std::to_string(i) + " of " + entry.name +
                           " has the wrong local shape");
    std::vector<int64_t> d;
    auto ptr = reinterpret_cast<int64_t>(
        t.data.empty() ? emptyBuffer : const_cast<char *>(t.data.data()));
    inputPtrs.insert(ptr);
    d.push_back(ptr);
    d.push_back(ptr);
    d.push_back(0);
    for (int64_t s : t.shape)
      d.push_back(s);
    int64_t stride = 1;
    std::vector<int64_t> strides(t.shape.size());
    for (int64_t k = static_cast<int64_t>(t.shape.size()) - 1; k >= 0; --k) {
      strides[k] = stride;
      stride *= t.shape[k];
    }
    d.insert(d.end(), strides.begin(), strides.end());
    descs.push_back(std::move(d));
  }
  size_t resultWords = 0;
  std::vector<size_t> offsets;
  for (const TensorSpec &o : entry.outputs) {
    offsets.push_back(resultWords);
    resultWords += 3 + 2 * o.shape.size();
  }
  std::vector<int64_t> results(std::max<size_t>(resultWords, 1), 0);
  std::vector<void *> argv;
  if (!entry.outputs.empty())
    argv.push_back(results.data());
  for (auto &d : descs)
    argv.push_back(d.data());
  char error[1024] = {0};
  int rc = invoke(reinterpret_cast<void (*)(void **)>(fn), argv.data(),
                  static_cast<void *>(rt::getCHandle(comm)), error,
                  sizeof(error));
  if (rc != 0)
    return Status::error(error);
  raw.entry = &entry;
  raw.results = std::move(results);
  raw.offsets = std::move(offsets);
  raw.inputPtrs = std::move(inputPtrs);
  raw.freeBuffer = freeBuffer;
  return Status::ok();
}

RawOutputs::RawOutputs(RawOutputs &&other) noexcept {
  *this = std::move(other);
}

RawOutputs &RawOutputs::operator=(RawOutputs &&other) noexcept {
  if (this != &other) {
    release();
    entry = other.entry;
    results = std::move(other.results);
    offsets = std::move(other.offsets);
    inputPtrs = std::move(other.inputPtrs);
    freeBuffer = other.freeBuffer;
    other.entry = nullptr;
    other.offsets.clear();
  }
  return *this;
}

RawOutputs::~RawOutputs() { release(); }

void RawOutputs::release() {
  // Results may share a buffer (a value returned twice) and may be an
  // input's buffer (never freed here).
  std::set<int64_t> freed;
  for (size_t w : offsets)
    if (int64_t allocated = results[w];
        allocated && !inputPtrs.count(allocated))
      freed.insert(allocated);
  for (int64_t allocated : freed)
    (freeBuffer ? freeBuffer : std::free)(reinterpret_cast<void *>(allocated));
  entry = nullptr;
  offsets.clear();
  results.clear();
  inputPtrs.clear();
}

bool RawOutputs::aliasesInput(size_t o) const {
  return inputPtrs.count(results[offsets.at(o)]) != 0;
}

void RawOutputs::copyOut(size_t o, HostTensor &t) const {
  const TensorSpec &spec = entry->outputs.at(o);
  size_t w = offsets.at(o), r = spec.shape.size();
  int64_t aligned = results[w + 1], offset = results[w + 2];
  t.dtype = spec.dtype;
  t.shape.assign(results.begin() + w + 3, results.begin() + w + 3 + r);
  std::vector<int64_t> strides(results.begin() + w + 3 + r,
                               results.begin() + w + 3 + 2 * r);
  size_t es = t.elementSize();
  const char *base = reinterpret_cast<const char *>(aligned) + offset * es;
  bool contiguous = true;
  for (int64_t k = static_cast<int64_t>(r) - 1, expect = 1; k >= 0; --k) {
    if (t.shape[k] != 1 && strides[k] != expect)
      contiguous = false;
    expect *= t.shape[k];
  }
  size_t bytes = static_cast<size_t>(t.numElements()) * es;
  if (contiguous) {
    // One pass, no zero fill; a buffer of the right size is reused.
    if (t.data.size() != bytes)
      t.data.assign(base, base + bytes);
    else if (bytes && t.data.data() != base)
      std::memmove(t.data.data(), base, bytes);
    return;
  }
  t.data.resize(bytes);
  std::vector<int64_t> i(r, 0);
  for (int64_t n = 0; n < t.numElements(); ++n) {
    int64_t off = 0;
    for (size_t k = 0; k < r; ++k)
      off += i[k] * strides[k];
    std::memcpy(t.data.data() + n * es, base + off * es, es);
    for (int64_t k = static_cast<int64_t>(r) - 1; k >= 0; --k) {
      if (++i[k] < t.shape[k])
        break;
      i[k] = 0;
    }
  }
}

HostTensor shardx::exec::scatter(const HostTensor &global,
                                 const TensorSpec &spec,
                                 const std::vector<int64_t> &meshShape,
                                 const std::vector<int64_t> &coords) {
  if (!spec.layout)
    return global;
  LocalShard shard =
      spec.layout->getLocalShard(meshShape, global.shape, coords);
  HostTensor local;
  local.shape = shard.shape;
  local.dtype = global.dtype;
  size_t es = global.elementSize();
  local.data.resize(local.numElements() * es);
  forEachElement(globalIndices(shard), global.shape, [&](int64_t l, int64_t g) {
    std::memcpy(local.data.data() + l * es, global.data.data() + g * es, es);
  });
  // Partial inputs: one term holds the value, the others the identity.
  for (size_t a = 0; a < spec.layout->getPartials().size(); ++a) {
    const auto &p = spec.layout->getPartials()[a];
    if (!p || coords[a] == 0)
      continue;
    if (*p == ReduceOp::Sum || *p == ReduceOp::Prod)
      for (int64_t n = 0; n < local.numElements(); ++n)
        storeFromDouble(local.data.data() + n * es, reduceIdentity<double>(*p),
                        local.dtype);
  }
  return local;
}

/// Whether assemble() reads rank `coords`'s shard: coordinate 0 on the
/// replicated axes (the others hold copies).
static bool readsRank(const Layout &layout, const std::vector<int64_t> &coords) {
  for (size_t a = 0; a < coords.size(); ++a)
    if (!layout.getPartials()[a] && layout.getShardedDim(a) < 0 &&
        coords[a] != 0)
      return false;
  return true;
}

/// assemble() of a layout that is Partial with different ops on several
/// axes: the terms nest in mesh order (axis 0 outermost), so the axes are
/// reduced innermost first, each over the ranks that differ only in its
/// coordinate (which hold the same shard).
static HostTensor
assembleNestedPartials(const std::vector<HostTensor> &locals,
                       const TensorSpec &spec,
                       const std::vector<int64_t> &meshShape) {
  const Layout &layout = *spec.layout;
  HostTensor global;
  global.shape = spec.globalShape;
  global.dtype = spec.dtype;
  size_t es = global.elementSize();
  global.data.resize(global.numElements() * es);
  // Per kept rank (coordinate 0 on replicated axes): its values, in the
  // order of its shard's global indices.
  std::map<std::vector<int64_t>, std::vector<double>> terms;
  std::map<std::vector<int64_t>, std::vector<int64_t>> indices;
  std::vector<std::vector<int64_t>> coords = allMeshCoords(meshShape);
  for (size_t r = 0; r < coords.size(); ++r) {
    if (!readsRank(layout, coords[r]))
      continue;
    LocalShard shard = layout.getLocalShard(meshShape, global.shape, coords[r]);
    std::vector<double> &values = terms[coords[r]];
    std::vector<int64_t> &where = indices[coords[r]];
    const HostTensor &local = locals.at(r);
    forEachElement(globalIndices(shard), global.shape,
                   [&](int64_t l, int64_t g) {
                     values.push_back(
                         loadAsDouble(local.data.data() + l * es, local.dtype));
                     where.push_back(g);
                   });
  }
  for (int64_t a = static_cast<int64_t>(meshShape.size()) - 1; a >= 0; --a) {
    const std::optional<ReduceOp> &op = layout.getPartials()[a];
    if (!op)
      continue;
    std::map<std::vector<int64_t>, std::vector<double>> reduced;
    for (auto &[key, values] : terms) {
      std::vector<int64_t> outer = key;
      outer[a] = 0;
      auto [it, fresh] = reduced.try_emplace(outer, values);
      if (!fresh)
        for (size_t i = 0; i < values.size(); ++i)
          reduceInto(it->second[i], values[i], *op);
    }
    if (*op == ReduceOp::Avg)
      for (auto &[key, values] : reduced)
        for (double &v : values)
          v /= static_cast<double>(meshShape[a]);
    terms = std::move(reduced);
  }
  for (const auto &[key, values] : terms) {
    const std::vector<int64_t> &where = indices.at(key);
    for (size_t i = 0; i < values.size(); ++i)
      storeFromDouble(global.data.data() + where[i] * es, values[i],
                      global.dtype);
  }
  return global;
}

HostTensor shardx::exec::assemble(const std::vector<HostTensor> &locals,
                                  const TensorSpec &spec,
                                  const std::vector<int64_t> &meshShape,
                                  std::string &error) {
  HostTensor global;
  global.shape = spec.globalShape;
  global.dtype = spec.dtype;
  size_t es = global.elementSize();
  global.data.resize(global.numElements() * es);
  if (!spec.layout) {
    return locals.at(0);
  }
  const Layout &layout = *spec.layout;
  std::optional<ReduceOp> op;
  for (const auto &p : layout.getPartials()) {
    if (!p)
      continue;
    if (op && *op != *p)
      return assembleNestedPartials(locals, spec, meshShape);
    op = p;
  }
  std::vector<double> acc;
  if (op)
    acc.assign(global.numElements(), reduceIdentity<double>(*op));
  std::vector<std::vector<int64_t>> coords = allMeshCoords(meshShape);
  int64_t partialCount = 1;
  for (size_t a = 0; a < meshShape.size(); ++a)
    if (layout.getPartials()[a])
      partialCount *= meshShape[a];
  for (size_t r = 0; r < coords.size(); ++r) {
    if (!readsRank(layout, coords[r]))
      continue;
    LocalShard shard = layout.getLocalShard(meshShape, global.shape, coords[r]);
    const HostTensor &local = locals.at(r);
    forEachElement(globalIndices(shard), global.shape,
                   [&](int64_t l, int64_t g) {
                     if (!op) {
                       std::memcpy(global.data.data() + g * es,
                                   local.data.data() + l * es, es);
                       return;
                     }
                     double v = loadAsDouble(local.data.data() + l * es,
                                             local.dtype);
                     reduceInto(acc[g], v, *op);
                   });
  }
  if (op)
    for (int64_t g = 0; g < global.numElements(); ++g)
      storeFromDouble(global.data.data() + g * es,
                      *op == ReduceOp::Avg ? acc[g] / partialCount : acc[g],
                      global.dtype);
  return global;
}

InputDomain shardx::exec::inputDomainOfTorchState(const std::string &state) {
  // PyTorch's optimizer state names (torch/optim/*.py): Adam, AdamW, RAdam
  // and Adagrad count steps; the others are running means or sums of
  // squares (Adam, Adagrad, RMSprop, Adadelta) or of |grad| (Adamax).
  if (state == "step")
    return InputDomain::Count;
  for (const char *name : {"acc_delta", "exp_avg_sq", "exp_inf",
                           "max_exp_avg_sq", "square_avg", "sum"})
    if (state == name)
      return InputDomain::NonNegative;
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

bool shardx::exec::readNpy(const std::string &path, HostTensor &out,
                           std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open " + path;
    return false;
  }
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    error = path + " is not a .npy file";
    return false;
  }
  uint32_t headerLen = 0;
  if (magic[6] == 1) {
    uint16_t h;
    in.read(reinterpret_cast<char *>(&h), 2);
    headerLen = h;
  } else {
    in.read(reinterpret_cast<char *>(&headerLen), 4);
  }
  std::string header(headerLen, ' ');
  in.read(header.data(), headerLen);
  auto field = [&](const std::string &key) {
    size_t p = header.find("'" + key + "'");
    return p == std::string::npos ? std::string() : header.substr(p);
  };
  std::string descr = field("descr");
  bool known = false;
  for (const rt::DTypeInfo &d : rt::kDTypes)
    if (d.npyDescr && descr.find(d.npyDescr) < 20) {
      out.dtype = d.type;
      known = true;
      break;
    }
  if (!known) {
    error = path + ": unsupported dtype (" + descr.substr(0, 20) + ")";
    return false;
  }
  if (field("fortran_order").find("True") < 24) {
    error = path + ": Fortran order is not supported";
    return false;
  }
  std::string shape = field("shape");
  size_t open = shape.find('('), close = shape.find(')');
  out.shape.clear();
  std::stringstream ss(shape.substr(open + 1, close - open - 1));
  std::string item;
  while (std::getline(ss, item, ','))
    if (item.find_first_not_of(" ") != std::string::npos)
      out.shape.push_back(std::stoll(item));
  out.data.resize(out.numElements() * out.elementSize());
  in.read(out.data.data(), out.data.size());
  if (!in) {
    error = path + ": truncated data";
    return false;
  }
  return true;
}

bool shardx::exec::writeNpy(const std::string &path, const HostTensor &t,
                            std::string &error) {
  const char *descr = rt::getDTypeInfo(t.dtype).npyDescr;
  if (!descr) {
    error = std::string("cannot write ") + rt::stringifyDType(t.dtype) +
            " as .npy";
    return false;
  }
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape.size(); ++i)
    header += std::to_string(t.shape[i]) + (t.shape.size() == 1 ? "," : (i + 1 < t.shape.size() ? ", " : ""));
  header += "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  // Write to a temporary name and rename: no partial file looks valid.
  std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary);
    if (!out) {
      error = "cannot write " + path;
      return false;
    }
    out.write("\x93NUMPY\x01\x00", 8);
    uint16_t len = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char *>(&len), 2);
    out.write(header.data(), header.size());
    out.write(t.data.data(), t.data.size());
    if (!out) {
      error = "cannot write " + path;
      std::remove(partial.c_str());
      return false;
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + partial;
    return false;
  }
  return true;
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

Difference shardx::exec::compare(const HostTensor &a, const HostTensor &b,
                                 double rtol, double atol,
                                 bool allowNonFinite) {
  Difference d;
  d.elements = a.numElements();
  if (a.shape != b.shape) {
    d.withinTolerance = false;
    d.mismatches = d.elements;
    d.maxAbs = d.maxRel = std::numeric_limits<double>::infinity();
    return d;
  }
  constexpr double inf = std::numeric_limits<double>::infinity();
  size_t ea = a.elementSize(), eb = b.elementSize();
  for (int64_t i = 0; i < a.numElements(); ++i) {
    double x = loadAsDouble(a.data.data() + i * ea, a.dtype);
    double y = loadAsDouble(b.data.data() + i * eb, b.dtype);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      // NaN == NaN and Inf == Inf (same sign) agree but show nothing.
      bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (same) {
        ++d.bothNonFinite;
      } else {
        ++d.mismatches;
        d.maxAbs = d.maxRel = inf;
      }
      continue;
    }
    double abs = std::fabs(x - y);
    d.maxAbs = std::max(d.maxAbs, abs);
    d.maxRel = std::max(d.maxRel, abs / std::max(std::fabs(y), atol));
    if (abs > atol + rtol * std::fabs(y))
      ++d.mismatches;
  }
  d.withinTolerance =
      d.mismatches == 0 && (allowNonFinite || d.bothNonFinite == 0);
  return d;
}
