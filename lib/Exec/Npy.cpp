//===- Npy.cpp - Host tensors as .npy files -------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Executor.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

using namespace shardx;
using namespace shardx::exec;

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
