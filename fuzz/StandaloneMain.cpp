//===- StandaloneMain.cpp - Replays fuzz inputs without libFuzzer ---------===//
//
// Part of ShardX.
//
// Lets regular (gcc, uninstrumented) builds run the fuzz targets over saved
// inputs: the regression inputs the campaigns found and the seed corpus.
// It runs every file once (directories recursively); it does not mutate or
// search: fuzzing is libFuzzer's, in the SHARDX_ENABLE_FUZZ build
// (scripts/fuzz.sh). It reports like libFuzzer (crash-/timeout- artifacts,
// "Done N runs"), so the lit tests read both builds alike:
//
//   shardx-fuzz-spmd [-timeout=T] [-artifact_prefix=P] (DIR | FILE)...
//
// Other flags (libFuzzer's, or a target's own -pipeline=) are left to
// LLVMFuzzerInitialize.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

extern "C" {
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
}

namespace {

/// The input being run, for the signal handlers (which may only use
/// async-signal-safe calls: the artifact names are prepared beforehand).
std::vector<uint8_t> current;
std::string crashPath, timeoutPath;
unsigned timeoutSeconds = 0;

void writeAll(int fd, const void *data, size_t size) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0)
      return;
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void say(const char *text) { writeAll(2, text, std::strlen(text)); }

void saveArtifact(const std::string &path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    writeAll(fd, current.data(), current.size());
    close(fd);
  }
  say("artifact_prefix='...'; Test unit written to ");
  say(path.c_str());
  say("\n");
}

void onCrash(int sig) {
  say("==ERROR: shardx-fuzz: deadly signal\n");
  saveArtifact(crashPath);
  signal(sig, SIG_DFL);
  raise(sig);
}

void onAlarm(int) {
  say("==ERROR: shardx-fuzz: timeout: an input ran longer than -timeout\n");
  saveArtifact(timeoutPath);
  _exit(70); // libFuzzer's -timeout_exitcode
}

/// FNV-1a, printed as hex: names artifacts after their content.
std::string hashOf(const std::vector<uint8_t> &data) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : data)
    h = (h ^ b) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void runOne(const std::vector<uint8_t> &input, const std::string &prefix) {
  current = input;
  std::string hash = hashOf(input);
  crashPath = prefix + "crash-" + hash;
  timeoutPath = prefix + "timeout-" + hash;
  if (timeoutSeconds)
    alarm(timeoutSeconds);
  // A copy the target may not keep: libFuzzer's contract.
  std::vector<uint8_t> copy = input;
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
  if (timeoutSeconds)
    alarm(0);
}

bool readFile(const std::string &path, std::vector<uint8_t> &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  out.assign(s.begin(), s.end());
  return true;
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void listFiles(const std::string &dir, std::vector<std::string> &files) {
  DIR *d = opendir(dir.c_str());
  if (!d)
    return;
  while (dirent *e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..")
      continue;
    std::string path = dir + "/" + name;
    if (isDirectory(path))
      listFiles(path, files);
    else
      files.push_back(path);
  }
  closedir(d);
}

} // namespace

/// libFuzzer's byte-level mutator, which LLVMFuzzerCustomMutator falls back
/// to. Never called here: this driver does not mutate.
extern "C" size_t LLVMFuzzerMutate(uint8_t *, size_t size, size_t) {
  return size;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  size_t maxLen = 1 << 16;
  std::string prefix = "./";
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *flag) -> const char * {
      size_t n = std::strlen(flag);
      return arg.compare(0, n, flag) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char *v = value("-timeout="))
      timeoutSeconds = static_cast<unsigned>(std::atoi(v));
    else if (const char *v = value("-max_len="))
      maxLen = static_cast<size_t>(std::atoll(v));
    else if (const char *v = value("-artifact_prefix="))
      prefix = v;
    else if (arg[0] == '-')
      continue; // a libFuzzer flag without meaning here, or the target's
    else
      inputs.push_back(arg);
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    signal(sig, onCrash);
  signal(SIGALRM, onAlarm);

  bool corpusMode = std::any_of(inputs.begin(), inputs.end(), isDirectory);
  std::vector<std::string> files;
  for (const std::string &in : inputs) {
    if (isDirectory(in))
      listFiles(in, files);
    else
      files.push_back(in);
  }
  std::sort(files.begin(), files.end());
  auto start = std::chrono::steady_clock::now();
  long long executed = 0;
  for (const std::string &file : files) {
    std::vector<uint8_t> data;
    if (!readFile(file, data)) {
      std::fprintf(stderr, "shardx-fuzz: cannot read %s\n", file.c_str());
      return 1;
    }
    if (!corpusMode)
      std::fprintf(stderr, "Running: %s\n", file.c_str());
    if (data.size() > maxLen)
      data.resize(maxLen);
    runOne(data, prefix);
    ++executed;
  }
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  std::fprintf(stderr, "Done %lld runs in %.0f second(s)\n", executed,
               seconds);
  return 0;
}
