//===- ObjectCache.cpp - Compiled objects on disk, by content -------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ObjectCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <vector>

using namespace mlir::shardx;
namespace fs = llvm::sys::fs;

std::string mlir::shardx::sha256Hex(llvm::StringRef data) {
  auto digest = llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(data.data()), data.size()));
  return llvm::toHex(digest, /*LowerCase=*/true);
}

namespace {

/// Writes `data` to `path` through a private name and a rename.
bool writeAtomically(llvm::StringRef path, llvm::StringRef data,
                     std::string &error) {
  llvm::SmallString<256> tmp;
  int fd;
  if (std::error_code ec = fs::createUniqueFile(path + ".%%%%%%.tmp", fd, tmp)) {
    error = ("cannot write '" + path + "': " + ec.message()).str();
    return false;
  }
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << data;
    os.close();
    if (os.has_error()) {
      error = ("cannot write '" + tmp + "': " + os.error().message()).str();
      os.clear_error();
      fs::remove(tmp);
      return false;
    }
  }
  if (std::error_code ec = fs::rename(tmp, path)) {
    error = ("cannot write '" + path + "': " + ec.message()).str();
    fs::remove(tmp);
    return false;
  }
  return true;
}

std::optional<std::string> readFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return std::nullopt;
  return (*buffer)->getBuffer().str();
}

/// Holds the cache's flock on `<dir>/.lock` while it lives (no lock when
/// the file cannot be opened: the caller goes on unlocked, as before).
class CacheLock {
public:
  explicit CacheLock(const std::string &dir) {
    std::string path = dir + "/.lock";
    fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0644);
    if (fd >= 0)
      ::flock(fd, LOCK_EX);
  }
  ~CacheLock() {
    if (fd >= 0) {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  }
  bool held() const { return fd >= 0; }

private:
  int fd = -1;
};

/// The tally `<dir>/.size`: "<bytes> <seconds since the epoch>", the bytes
/// the entries held at the last scan (its time) plus those stored since.
struct Tally {
  uint64_t bytes = 0;
  int64_t scanned = 0;
};

std::optional<Tally> readTally(const std::string &dir) {
  std::optional<std::string> text = readFile(dir + "/.size");
  if (!text)
    return std::nullopt;
  llvm::StringRef rest = llvm::StringRef(*text).trim();
  auto [bytesText, scannedText] = rest.split(' ');
  Tally tally;
  if (bytesText.getAsInteger(10, tally.bytes) ||
      scannedText.trim().getAsInteger(10, tally.scanned))
    return std::nullopt;
  return tally;
}

void writeTally(const std::string &dir, const Tally &tally) {
  std::string error; // a tally not written only makes the next evict scan
  (void)writeAtomically(
      dir + "/.size",
      (llvm::Twine(tally.bytes) + " " + llvm::Twine(tally.scanned)).str(),
      error);
}

/// The status of `path`, or nullopt when it cannot be read.
std::optional<struct stat> statOf(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return std::nullopt;
  return st;
}

/// The disk space a file takes: its allocated blocks, at least its size (a
/// small object takes a whole block, so a cache of them holds about twice
/// its bytes).
uint64_t diskBytes(const struct stat &st) {
  return std::max<uint64_t>(uint64_t(st.st_blocks) * 512, st.st_size);
}

int64_t secondsNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

ObjectCache ObjectCache::fromEnvironment(std::string &error) {
  ObjectCache cache;
  llvm::SmallString<256> dir;
  const char *explicitDir = std::getenv("SHARDX_KERNEL_CACHE");
  std::string variable = "SHARDX_KERNEL_CACHE";
  if (explicitDir && *explicitDir) {
    llvm::StringRef v(explicitDir);
    if (v == "0" || v.equals_insensitive("off"))
      return cache;
    dir = v;
  } else if (const char *jit = std::getenv("SHARDX_CACHE_DIR"); jit && *jit) {
    dir = jit;
    llvm::sys::path::append(dir, "kernels");
    variable = "SHARDX_CACHE_DIR";
  } else {
    const char *home = std::getenv("HOME");
    if (!home || !*home)
      return cache; // nowhere to keep it: compile everything
    dir = home;
    llvm::sys::path::append(dir, ".cache", "shardx", "kernels");
    variable = "HOME";
  }
  if (std::error_code ec = fs::create_directories(dir)) {
    error = ("the kernel cache directory '" + dir + "' (from $" + variable +
             ") cannot be created: " + ec.message())
                .str();
    return cache;
  }
  if (!fs::is_directory(dir) || ::access(dir.c_str(), W_OK) != 0) {
    error = ("the kernel cache directory '" + dir + "' (from $" + variable +
             ") is not a writable directory")
                .str();
    return cache;
  }
  double mb = 1024;
  if (const char *max = std::getenv("SHARDX_CACHE_MAX_MB"); max && *max) {
    char *end = nullptr;
    double v = std::strtod(max, &end);
    if (end && *end == '\0' && v > 0)
      mb = v;
  }
  cache.dir = std::string(dir);
  cache.maxBytes = uint64_t(mb * 1024 * 1024);
  return cache;
}

std::optional<std::string> ObjectCache::lookup(llvm::StringRef key) const {
  if (!isEnabled())
    return std::nullopt;
  std::string object = dir + "/" + key.str() + ".o";
  std::string sum = dir + "/" + key.str() + ".sum";
  std::optional<std::string> want = readFile(sum);
  if (!want)
    return std::nullopt;
  std::optional<std::string> bytes = readFile(object);
  if (!bytes || sha256Hex(*bytes) != llvm::StringRef(*want).trim())
    return std::nullopt;
  // The last use, for the LRU eviction (a failure only ages the entry).
  ::utimes(sum.c_str(), nullptr);
  return bytes;
}

bool ObjectCache::store(llvm::StringRef key, llvm::StringRef object,
                        std::string &error) const {
  if (!isEnabled())
    return true;
  std::string sum = sha256Hex(object);
  if (!writeAtomically(dir + "/" + key.str() + ".o", object, error) ||
      !writeAtomically(dir + "/" + key.str() + ".sum", sum, error))
    return false;
  // Counted in the tally, so that evict() need not list the directory.
  CacheLock lock(dir);
  std::optional<struct stat> objectStat = statOf(dir + "/" + key.str() + ".o");
  std::optional<struct stat> sumStat = statOf(dir + "/" + key.str() + ".sum");
  if (std::optional<Tally> tally = readTally(dir);
      tally && objectStat && sumStat) {
    tally->bytes += diskBytes(*objectStat) + diskBytes(*sumStat);
    writeTally(dir, *tally);
  }
  return true;
}

unsigned ObjectCache::evict() const {
  if (!isEnabled())
    return 0;
  // Processes take turns, as the JIT's eviction does (flock on .lock).
  CacheLock lock(dir);
  if (!lock.held())
    return 0;
  // Listing the directory costs two stats per entry (seconds for the
  // hundreds of thousands of small objects a 1 GiB bound admits), so it is
  // listed only when the tally is over the bound, missing, or an hour old
  // (what the tally cannot see: entries a writer without it stored, or
  // a crashed writer's leftovers, themselves removed after an hour).
  int64_t now = secondsNow();
  if (std::optional<Tally> tally = readTally(dir);
      tally && tally->bytes <= maxBytes && now - tally->scanned >= 0 &&
      now - tally->scanned < 3600)
    return 0;
  struct Entry {
    std::chrono::system_clock::time_point used;
    std::string key;
    uint64_t size;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  auto clock = std::chrono::system_clock::now();
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (name.ends_with(".tmp") ||
        (name.ends_with(".o") &&
         !fs::exists(dir + "/" + name.drop_back(2).str() + ".sum"))) {
      // A crashed writer's leftover (an hour old: not one being written).
      fs::file_status leftover;
      if (!fs::status(it->path(), leftover) &&
          clock - leftover.getLastModificationTime() > std::chrono::hours(1))
        fs::remove(it->path());
      continue;
    }
    if (!name.consume_back(".sum"))
      continue;
    std::optional<struct stat> sumStat = statOf(it->path());
    std::optional<struct stat> objectStat =
        statOf(dir + "/" + name.str() + ".o");
    if (!sumStat || !objectStat)
      continue;
    uint64_t size = diskBytes(*sumStat) + diskBytes(*objectStat);
    auto used =
        std::chrono::system_clock::from_time_t(sumStat->st_mtim.tv_sec) +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(sumStat->st_mtim.tv_nsec));
    entries.push_back({used, name.str(), size});
    total += size;
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry &a, const Entry &b) { return a.used < b.used; });
  unsigned removed = 0;
  for (const Entry &e : entries) {
    if (total <= maxBytes)
      break;
    // The sum first: a reader never takes a half-removed entry as valid.
    fs::remove(dir + "/" + e.key + ".sum");
    fs::remove(dir + "/" + e.key + ".o");
    total -= e.size;
    ++removed;
  }
  writeTally(dir, {total, now});
  return removed;
}
