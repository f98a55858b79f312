//===- FileStore.cpp - The file-store bootstrap ---------------------------===//
//
// Part of ShardX.
//
// Rank 0 writes a key's bytes to `<dir>/<key>.tmp.<pid>` and renames it to
// `<dir>/<key>` (a rename is atomic, so no rank reads a partial file); the
// other ranks poll for `<dir>/<key>` every millisecond or so until it holds
// the expected number of bytes or the timeout passes. Keys are never
// removed: every job needs a fresh folder (rank 0 fails on a key that
// exists).
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Bootstrap.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace shardx::rt {

Bootstrap::~Bootstrap() = default;

namespace {

class FileStore : public Bootstrap {
public:
  FileStore(int64_t rank, int64_t worldSize, std::string dir, double timeout)
      : rank(rank), worldSize(worldSize), dir(std::move(dir)),
        timeout(timeout) {}

  const char *getName() const override { return "file store"; }
  int64_t getRank() const override { return rank; }
  int64_t getWorldSize() const override { return worldSize; }

  Status broadcast(const std::string &key, void *data, size_t bytes) override {
    std::string path = dir + "/" + key;
    if (rank == 0) {
      // A key left by an earlier job would hand its stale bytes to ranks
      // that read before this one is written.
      if (access(path.c_str(), F_OK) == 0)
        return Status::error("file store: " + path +
                             " exists (left by an earlier job?): use a fresh "
                             "SHARDX_STORE_DIR for every job");
      std::string tmp = path + ".tmp." + std::to_string(getpid());
      {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(static_cast<const char *>(data),
                  static_cast<std::streamsize>(bytes));
        out.close();
        if (!out)
          return Status::error("file store: cannot write " + tmp + ": " +
                               std::strerror(errno));
      }
      if (std::rename(tmp.c_str(), path.c_str()) != 0)
        return Status::error("file store: cannot rename " + tmp + " to " +
                             path + ": " + std::strerror(errno));
      return Status::ok();
    }
    auto start = std::chrono::steady_clock::now();
    for (;;) {
      std::ifstream in(path, std::ios::binary);
      if (in) {
        std::string content((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
        if (content.size() != bytes)
          return Status::error("file store: " + path + " holds " +
                               std::to_string(content.size()) + " bytes, not " +
                               std::to_string(bytes));
        std::memcpy(data, content.data(), bytes);
        return Status::ok();
      }
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      if (waited > timeout) {
        std::ostringstream os;
        os << "file store: rank " << rank << " waited " << timeout << " s for "
           << path
           << " (rank 0 writes it; is rank 0 running, with the same "
              "SHARDX_STORE_DIR?)";
        return Status::error(os.str());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

private:
  int64_t rank, worldSize;
  std::string dir;
  double timeout;
};

bool parseEnvInt(const char *name, int64_t &value, std::string &error) {
  const char *text = std::getenv(name);
  if (!text || !*text) {
    error = std::string(name) + " is not set";
    return false;
  }
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (*end || errno || v < 0) {
    error = std::string(name) + " must be a whole number, not '" + text + "'";
    return false;
  }
  value = v;
  return true;
}

} // namespace

std::unique_ptr<Bootstrap> createFileStoreBootstrap(int64_t rank,
                                                    int64_t worldSize,
                                                    std::string dir,
                                                    double timeoutSeconds) {
  return std::make_unique<FileStore>(rank, worldSize, std::move(dir),
                                     timeoutSeconds);
}

std::unique_ptr<Bootstrap>
createFileStoreBootstrapFromEnv(double timeoutSeconds, std::string &error) {
  int64_t rank = 0, size = 0;
  std::string why;
  const char *dir = std::getenv("SHARDX_STORE_DIR");
  if (!parseEnvInt("SHARDX_RANK", rank, why) ||
      !parseEnvInt("SHARDX_WORLD_SIZE", size, why)) {
    error = "file store: " + why +
            " (a launcher without MPI sets SHARDX_RANK, SHARDX_WORLD_SIZE "
            "and SHARDX_STORE_DIR)";
    return nullptr;
  }
  if (!dir || !*dir) {
    error = "file store: SHARDX_STORE_DIR is not set (a folder every rank "
            "can read and write)";
    return nullptr;
  }
  if (size < 1 || rank >= size) {
    error = "file store: SHARDX_RANK " + std::to_string(rank) +
            " is not below SHARDX_WORLD_SIZE " + std::to_string(size);
    return nullptr;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    error = std::string("file store: SHARDX_STORE_DIR ") + dir +
            " is not a writable folder: " + std::strerror(errno);
    return nullptr;
  }
  return createFileStoreBootstrap(rank, size, dir, timeoutSeconds);
}

} // namespace shardx::rt
