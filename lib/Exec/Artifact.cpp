//===- Artifact.cpp - Load and call one rank of an artifact ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Checksum.h"
#include "shardx/Exec/Executor.h"
#include "shardx/Runtime/CApi.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fstream>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <set>
#include <sys/stat.h>

using namespace shardx;
using namespace shardx::exec;
using shardx::rt::Communicator;
using shardx::rt::DType;
using shardx::rt::Status;

namespace {

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

/// Checks what the dynamic loader trusts of a shared object before it maps
/// it: an ELF64 little-endian shared object for this machine whose program
/// headers, segments and section headers lie inside the file. dlopen maps
/// a truncated file and faults on the missing pages (SIGBUS), and follows
/// corrupt program headers into a crash (SIGSEGV); a file cut short by a
/// full disk or an interrupted copy is the usual case.
bool checkSharedObject(const std::string &path, std::string &error) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    error = "cannot load " + path + ": it is a directory";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot load " + path + ": " + std::strerror(errno);
    return false;
  }
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  auto fail = [&](const std::string &why) {
    error = "cannot load " + path + ": not a valid shared object (" + why +
            "; a truncated or corrupt file?)";
    return false;
  };
  if (end < 0)
    return fail("cannot read its size");
  const uint64_t size = static_cast<uint64_t>(end);
  // [offset, offset + count * entry) within the file, without overflow.
  auto inside = [&](uint64_t offset, uint64_t count, uint64_t entry) {
    return offset <= size && (entry == 0 || count <= (size - offset) / entry);
  };
  Elf64_Ehdr header;
  if (size < sizeof(header) ||
      !in.read(reinterpret_cast<char *>(&header), sizeof(header)))
    return fail("shorter than an ELF header");
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
    return fail("no ELF magic");
  if (header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_ident[EI_DATA] != ELFDATA2LSB || header.e_type != ET_DYN)
    return fail("not a 64-bit little-endian ELF shared object");
#if defined(__x86_64__)
  if (header.e_machine != EM_X86_64)
    return fail("built for another machine (e_machine " +
                std::to_string(header.e_machine) + ")");
#elif defined(__aarch64__)
  if (header.e_machine != EM_AARCH64)
    return fail("built for another machine (e_machine " +
                std::to_string(header.e_machine) + ")");
#endif
  if (header.e_phentsize != sizeof(Elf64_Phdr) || header.e_phnum == 0 ||
      !inside(header.e_phoff, header.e_phnum, sizeof(Elf64_Phdr)))
    return fail("its program headers are not inside the file");
  if (header.e_shnum != 0 &&
      (header.e_shentsize != sizeof(Elf64_Shdr) ||
       !inside(header.e_shoff, header.e_shnum, sizeof(Elf64_Shdr))))
    return fail("its section headers are not inside the file (" +
                std::to_string(size) + " bytes)");
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  in.seekg(static_cast<std::streamoff>(header.e_phoff));
  if (!in.read(
          reinterpret_cast<char *>(segments.data()),
          static_cast<std::streamsize>(segments.size() * sizeof(Elf64_Phdr))))
    return fail("cannot read its program headers");
  for (const Elf64_Phdr &p : segments) {
    bool known =
        p.p_type <= PT_TLS || (p.p_type >= PT_LOOS && p.p_type <= PT_HIPROC);
    if (!known)
      return fail("a program header of unknown type " +
                  std::to_string(p.p_type));
    if (p.p_type == PT_NULL)
      continue;
    if (!inside(p.p_offset, p.p_filesz, 1) || p.p_filesz > p.p_memsz)
      return fail("a segment of " + std::to_string(p.p_filesz) +
                  " bytes at offset " + std::to_string(p.p_offset) +
                  " is not inside the file (" + std::to_string(size) +
                  " bytes)");
    if (p.p_type == PT_LOAD && p.p_align > 1 &&
        ((p.p_align & (p.p_align - 1)) != 0 ||
         p.p_offset % p.p_align != p.p_vaddr % p.p_align))
      return fail("a loadable segment is misaligned");
  }
  return true;
}

} // namespace

std::unique_ptr<Artifact> Artifact::load(const std::string &path,
                                         std::string &error) {
  keepFreedMemory();
  if (!checkSharedObject(path, error))
    return nullptr;
  // After the ELF checks, which name a truncated file as one (its footer
  // is gone with its end).
  ChecksumStatus sum = verifyChecksum(path, error);
  if (sum == ChecksumStatus::Differs || sum == ChecksumStatus::Unreadable)
    return nullptr;
  error.clear();
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
  // A CUDA artifact's runtime: its device allocator and copies.
  a->cuda.alloc = reinterpret_cast<void *(*)(int64_t)>(
      dlsym(handle, "shardx_rt_cuda_alloc"));
  a->cuda.free =
      reinterpret_cast<void (*)(void *)>(dlsym(handle, "shardx_rt_cuda_free"));
  a->cuda.copy = reinterpret_cast<void (*)(void *, const void *, int64_t)>(
      dlsym(handle, "shardx_rt_cuda_copy"));
  a->cuda.synchronize =
      reinterpret_cast<void (*)()>(dlsym(handle, "shardx_rt_cuda_synchronize"));
  if (!a->cuda.free || !a->cuda.copy || !a->cuda.synchronize)
    a->cuda.alloc = nullptr;
  // Pinned staging (absent from artifacts built before it).
  a->cuda.stageToDevice =
      reinterpret_cast<void (*)(void *, const void *, int64_t)>(
          dlsym(handle, "shardx_rt_cuda_stage_to_device"));
  a->cuda.stagingReset = reinterpret_cast<void (*)()>(
      dlsym(handle, "shardx_rt_cuda_staging_reset"));
  if (!a->cuda.stagingReset)
    a->cuda.stageToDevice = nullptr;
  a->infoText = info;
  if (!readProgramInfo(a->infoText, a->info, error)) {
    error = "bad program description in " + path + ": " + error;
    return nullptr;
  }
  a->meshShape = a->info.getMeshShape();
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
  for (const EntryPoint &e : info.functions)
    if (e.name == name)
      return &e;
  return nullptr;
}

void Artifact::setComputeThreads(int threads) const {
  if (threads > 0 && setThreads)
    setThreads(threads);
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

/// The memref descriptor {allocated, aligned, offset, sizes, strides} of a
/// dense row-major buffer at `ptr`.
static std::vector<int64_t> denseDescriptor(int64_t ptr,
                                            const std::vector<int64_t> &shape) {
  std::vector<int64_t> d{ptr, ptr, 0};
  d.insert(d.end(), shape.begin(), shape.end());
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (int64_t k = static_cast<int64_t>(shape.size()) - 1; k >= 0; --k) {
    strides[k] = stride;
    stride *= shape[k];
  }
  d.insert(d.end(), strides.begin(), strides.end());
  return d;
}

/// Whether `strides` lay `shape` out densely in row-major order (extents of
/// 1 take any stride).
static bool isRowMajor(const std::vector<int64_t> &shape,
                       const std::vector<int64_t> &strides) {
  for (int64_t k = static_cast<int64_t>(shape.size()) - 1, expect = 1; k >= 0;
       --k) {
    if (shape[k] != 1 && strides[k] != expect)
      return false;
    expect *= shape[k];
  }
  return true;
}

/// Copies the elements of the strided view (`shape`, `strides`, elements of
/// `es` bytes) at `src` densely, in row-major order, into `dst`.
static void gatherStrided(char *dst, const char *src,
                          const std::vector<int64_t> &shape,
                          const std::vector<int64_t> &strides, size_t es) {
  int64_t elements = 1;
  for (int64_t n : shape)
    elements *= n;
  std::vector<int64_t> i(shape.size(), 0);
  for (int64_t n = 0; n < elements; ++n) {
    int64_t off = 0;
    for (size_t k = 0; k < shape.size(); ++k)
      off += i[k] * strides[k];
    std::memcpy(dst + n * es, src + off * es, es);
    for (int64_t k = static_cast<int64_t>(shape.size()) - 1; k >= 0; --k) {
      if (++i[k] < shape[k])
        break;
      i[k] = 0;
    }
  }
}

static Status checkLocalShape(const EntryPoint &entry, size_t i,
                              const HostTensor &t) {
  const TensorSpec &spec = entry.inputs[i];
  bool shapeOk = t.shape.size() == spec.shape.size();
  for (size_t d = 0; shapeOk && d < t.shape.size(); ++d)
    shapeOk = spec.shape[d] < 0 || spec.shape[d] == t.shape[d];
  if (!shapeOk)
    return Status::error("input " + std::to_string(i) + " of " + entry.name +
                         " has the wrong local shape");
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
  std::vector<std::shared_ptr<const HostTensor>> hostCopies;
  static char emptyBuffer[1];
  for (size_t i = 0; i < localInputs.size(); ++i) {
    const HostTensor *t = localInputs[i];
    if (t->onDevice()) {
      // A shard a GPU session left on the device, passed to a host program.
      hostCopies.push_back(onHost(std::shared_ptr<const HostTensor>(
          std::shared_ptr<const HostTensor>(), t)));
      t = hostCopies.back().get();
    }
    if (Status s = checkLocalShape(entry, i, *t); !s)
      return s;
    auto ptr = reinterpret_cast<int64_t>(
        t->data.empty() ? emptyBuffer : const_cast<char *>(t->data.data()));
    inputPtrs.insert(ptr);
    descs.push_back(denseDescriptor(ptr, t->shape));
  }
  Status s = invokeEntry(fn, entry, comm, std::move(descs),
                         std::move(inputPtrs), raw, freeBuffer);
  // An output may be one of the inputs' buffers: the host copies of device
  // inputs live as long as the results.
  if (s)
    raw.hostInputs = std::move(hostCopies);
  return s;
}

Status
Artifact::callOnDevice(const EntryPoint &entry, Communicator &comm,
                       const std::vector<const HostTensor *> &localInputs,
                       RawOutputs &raw) const {
  raw.release();
  if (!isCuda())
    return Status::error(path + " is not a CUDA artifact");
  if (localInputs.size() != entry.inputs.size())
    return Status::error(entry.name + " takes " +
                         std::to_string(entry.inputs.size()) + " inputs");
  void *fn = dlsym(handle, ("shardx_entry_" + entry.name + "_device").c_str());
  if (!fn)
    return Status::error("artifact has no device entry point " + entry.name);
  std::vector<std::vector<int64_t>> descs;
  std::set<int64_t> inputPtrs;
  std::vector<void *> staged;
  // The rank's last call synchronized its stream: its pinned staging
  // memory is free again.
  if (cuda.stageToDevice)
    cuda.stagingReset();
  for (size_t i = 0; i < localInputs.size(); ++i) {
    const HostTensor &t = *localInputs[i];
    if (Status s = checkLocalShape(entry, i, t); !s) {
      for (void *p : staged)
        cuda.free(p);
      return s;
    }
    void *ptr;
    if (t.onDevice()) {
      ptr = t.device->address;
    } else {
      // A host input (a batch, a tensor made on the host) is copied in for
      // this call: through pinned memory, queued ahead of the program on
      // the rank's stream.
      int64_t bytes = t.numElements() * static_cast<int64_t>(t.elementSize());
      ptr = cuda.alloc(std::max<int64_t>(bytes, 1));
      if (bytes > 0)
        (cuda.stageToDevice ? cuda.stageToDevice
                            : cuda.copy)(ptr, t.data.data(), bytes);
      staged.push_back(ptr);
    }
    inputPtrs.insert(reinterpret_cast<int64_t>(ptr));
    descs.push_back(denseDescriptor(reinterpret_cast<int64_t>(ptr), t.shape));
  }
  Status s = invokeEntry(fn, entry, comm, std::move(descs),
                         std::move(inputPtrs), raw, cuda.free);
  // The results are read by other streams (the next call's artifact) and
  // by the host once this returns.
  cuda.synchronize();
  raw.staged = std::move(staged);
  raw.deviceCopy = cuda.copy;
  raw.deviceAlloc = cuda.alloc;
  if (!s) {
    raw.release();
    return s;
  }
  return s;
}

Status Artifact::invokeEntry(void *fn, const EntryPoint &entry,
                             Communicator &comm,
                             std::vector<std::vector<int64_t>> descs,
                             std::set<int64_t> inputPtrs, RawOutputs &raw,
                             void (*free)(void *)) const {
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
  raw.entry = &entry;
  raw.results = std::move(results);
  raw.offsets = std::move(offsets);
  raw.inputPtrs = std::move(inputPtrs);
  raw.freeBuffer = free;
  if (rc != 0) {
    // A failed run ran to its end and filled its outputs (zeroed), unless
    // it failed before the program started (the descriptors stay null,
    // which release skips): they are freed, never the caller's.
    raw.release();
    return Status::error(error);
  }
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
    deviceCopy = other.deviceCopy;
    deviceAlloc = other.deviceAlloc;
    staged = std::move(other.staged);
    taken = std::move(other.taken);
    hostInputs = std::move(other.hostInputs);
    other.entry = nullptr;
    other.offsets.clear();
    other.staged.clear();
    other.taken.clear();
  }
  return *this;
}

RawOutputs::~RawOutputs() { release(); }

void RawOutputs::release() {
  // Results may share a buffer (a value returned twice) and may be an
  // input's buffer (never freed here) or given away by takeOut.
  std::set<int64_t> freed;
  for (size_t w : offsets)
    if (int64_t allocated = results[w];
        allocated && !inputPtrs.count(allocated) && !taken.count(allocated))
      freed.insert(allocated);
  for (int64_t allocated : freed)
    (freeBuffer ? freeBuffer : std::free)(reinterpret_cast<void *>(allocated));
  for (void *p : staged)
    freeBuffer(p);
  entry = nullptr;
  offsets.clear();
  results.clear();
  inputPtrs.clear();
  staged.clear();
  taken.clear();
  hostInputs.clear();
  deviceCopy = nullptr;
  deviceAlloc = nullptr;
}

HostTensor RawOutputs::takeOut(size_t o) {
  const TensorSpec &spec = entry->outputs.at(o);
  size_t w = offsets.at(o), r = spec.shape.size();
  int64_t allocated = results[w], aligned = results[w + 1],
          offset = results[w + 2];
  HostTensor t;
  t.dtype = spec.dtype;
  t.shape.assign(results.begin() + w + 3, results.begin() + w + 3 + r);
  std::vector<int64_t> strides(results.begin() + w + 3 + r,
                               results.begin() + w + 3 + 2 * r);
  auto es = static_cast<int64_t>(t.elementSize());
  int64_t bytes = t.numElements() * es;
  bool dense = isRowMajor(t.shape, strides);
  auto data = std::make_shared<DeviceData>();
  data->copy = deviceCopy;
  void (*free)(void *) = freeBuffer;
  auto own = [free](void *p) {
    return std::shared_ptr<void>(p, [free](void *q) { free(q); });
  };
  char *first = reinterpret_cast<char *>(aligned) + offset * es;
  if (dense && !inputPtrs.count(allocated)) {
    // The program's buffer becomes the tensor's (shared with an output
    // returned twice).
    auto it = taken.find(allocated);
    if (it == taken.end())
      it = taken.emplace(allocated, own(reinterpret_cast<void *>(allocated)))
               .first;
    data->owner = it->second;
    data->address = first;
  } else if (dense) {
    // An input's buffer (the program returned an argument): a copy, so that
    // the input and the output stay independent.
    void *copy = deviceAlloc(std::max<int64_t>(bytes, 1));
    if (bytes > 0)
      deviceCopy(copy, first, bytes);
    data->owner = own(copy);
    data->address = copy;
  } else {
    // A strided view: its elements gathered on the host, then copied in.
    int64_t last = 0;
    for (size_t k = 0; k < r; ++k) {
      if (t.shape[k] == 0) {
        last = -1;
        break;
      }
      last += (t.shape[k] - 1) * strides[k];
    }
    std::vector<char> extent(
        static_cast<size_t>(std::max<int64_t>(0, (last + 1) * es)));
    if (!extent.empty())
      deviceCopy(extent.data(), first, static_cast<int64_t>(extent.size()));
    std::vector<char> dense(static_cast<size_t>(bytes));
    gatherStrided(dense.data(), extent.data(), t.shape, strides,
                  static_cast<size_t>(es));
    void *copy = deviceAlloc(std::max<int64_t>(bytes, 1));
    if (bytes > 0)
      deviceCopy(copy, dense.data(), bytes);
    data->owner = own(copy);
    data->address = copy;
  }
  t.device = std::move(data);
  return t;
}

std::shared_ptr<const HostTensor>
shardx::exec::onHost(std::shared_ptr<const HostTensor> t) {
  if (!t || !t->onDevice())
    return t;
  auto host = std::make_shared<HostTensor>();
  host->shape = t->shape;
  host->dtype = t->dtype;
  auto bytes = static_cast<int64_t>(t->numElements() * t->elementSize());
  host->data.resize(static_cast<size_t>(bytes));
  if (bytes > 0)
    t->device->copy(host->data.data(), t->device->address, bytes);
  return host;
}

bool RawOutputs::aliasesInput(size_t o) const {
  return inputPtrs.count(results[offsets.at(o)]) != 0;
}

void RawOutputs::copyOut(size_t o, HostTensor &t) const {
  // `t` may be a donor that held device memory: its elements are `data`
  // from now on.
  t.device.reset();
  const TensorSpec &spec = entry->outputs.at(o);
  size_t w = offsets.at(o), r = spec.shape.size();
  int64_t aligned = results[w + 1], offset = results[w + 2];
  t.dtype = spec.dtype;
  t.shape.assign(results.begin() + w + 3, results.begin() + w + 3 + r);
  std::vector<int64_t> strides(results.begin() + w + 3 + r,
                               results.begin() + w + 3 + 2 * r);
  size_t es = t.elementSize();
  const char *base = reinterpret_cast<const char *>(aligned) + offset * es;
  size_t bytes = static_cast<size_t>(t.numElements()) * es;
  if (isRowMajor(t.shape, strides)) {
    // One pass, no zero fill; a buffer of the right size is reused.
    if (t.data.size() != bytes)
      t.data.assign(base, base + bytes);
    else if (bytes && t.data.data() != base)
      std::memmove(t.data.data(), base, bytes);
    return;
  }
  t.data.resize(bytes);
  gatherStrided(t.data.data(), base, t.shape, strides, es);
}
