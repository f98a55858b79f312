//===- Npy.cpp - Host tensors as .npy files -------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Executor.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>

using namespace shardx;
using namespace shardx::exec;

namespace {

/// The header dict of a .npy file, as numpy writes it (a Python literal):
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (8, 16), }`. Only
/// what numpy's own reader accepts is read: the three keys, each once, a
/// string, a bool and a tuple of non-negative integers.
class NpyHeader {
public:
  explicit NpyHeader(std::string_view text) : text(text) {}

  /// Parses the dict; sets `error` (a phrase) on failure.
  bool parse(std::string &error) {
    if (!consume('{'))
      return fail("the header is not a dict", error);
    while (!consume('}')) {
      std::string key;
      if (!parseString(key) || !consume(':'))
        return fail("the header is not a dict of 'key': value", error);
      if (key == "descr" && !haveDescr) {
        if (!parseString(descr))
          return fail("'descr' is not a string", error);
        haveDescr = true;
      } else if (key == "fortran_order" && !haveOrder) {
        if (consumeWord("True"))
          fortranOrder = true;
        else if (!consumeWord("False"))
          return fail("'fortran_order' is not True or False", error);
        haveOrder = true;
      } else if (key == "shape" && !haveShape) {
        if (!parseShape(error))
          return false;
        haveShape = true;
      } else {
        return fail("the header has an unexpected or repeated key '" + key +
                        "'",
                    error);
      }
      if (!consume(',') && !peek('}'))
        return fail("the header is not a dict of 'key': value", error);
    }
    skipSpace();
    if (pos != text.size())
      return fail("the header has text after its dict", error);
    if (!haveDescr || !haveOrder || !haveShape)
      return fail("the header lacks '" +
                      std::string(!haveDescr   ? "descr"
                                  : !haveOrder ? "fortran_order"
                                               : "shape") +
                      "'",
                  error);
    return true;
  }

  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;

private:
  static bool fail(const std::string &why, std::string &error) {
    error = why;
    return false;
  }
  void skipSpace() {
    while (pos < text.size() &&
           std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool peek(char c) {
    skipSpace();
    return pos < text.size() && text[pos] == c;
  }
  bool consume(char c) {
    if (!peek(c))
      return false;
    ++pos;
    return true;
  }
  bool consumeWord(std::string_view word) {
    skipSpace();
    if (text.substr(pos, word.size()) != word)
      return false;
    pos += word.size();
    return true;
  }
  /// A quoted string without escapes (numpy's keys and dtypes have none).
  bool parseString(std::string &out) {
    skipSpace();
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return false;
    char quote = text[pos];
    size_t end = text.find(quote, pos + 1);
    if (end == std::string_view::npos ||
        text.substr(pos + 1, end - pos - 1).find('\\') !=
            std::string_view::npos)
      return false;
    out.assign(text.substr(pos + 1, end - pos - 1));
    pos = end + 1;
    return true;
  }
  bool parseShape(std::string &error) {
    if (!consume('('))
      return fail("'shape' is not a tuple", error);
    while (!consume(')')) {
      skipSpace();
      size_t start = pos;
      while (pos < text.size() &&
             std::isdigit(static_cast<unsigned char>(text[pos])))
        ++pos;
      std::string digits(text.substr(start, pos - start));
      if (digits.empty())
        return fail("'shape' is not a tuple of non-negative integers", error);
      errno = 0;
      char *end = nullptr;
      unsigned long long value = std::strtoull(digits.c_str(), &end, 10);
      if (errno == ERANGE || value > static_cast<unsigned long long>(
                                         std::numeric_limits<int64_t>::max()))
        return fail("'shape' has the dim " + digits + ", past a 64-bit integer",
                    error);
      shape.push_back(static_cast<int64_t>(value));
      if (!consume(',') && !peek(')'))
        return fail("'shape' is not a tuple of non-negative integers", error);
    }
    return true;
  }

  std::string_view text;
  size_t pos = 0;
  bool haveDescr = false, haveOrder = false, haveShape = false;
};

} // namespace

bool shardx::exec::readNpy(const std::string &path, HostTensor &out,
                           std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  in.seekg(0, std::ios::end);
  const std::streamoff fileSize = in.tellg();
  in.seekg(0, std::ios::beg);
  unsigned char magic[8];
  in.read(reinterpret_cast<char *>(magic), 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    error = path + " is not a .npy file";
    return false;
  }
  // Format 1.0 has a 2-byte header length; 2.0 and 3.0 (numpy's choice for
  // longer or non-Latin-1 headers) a 4-byte one. Little-endian.
  if (magic[6] < 1 || magic[6] > 3 || magic[7] != 0) {
    error = path + ": .npy format version " + std::to_string(magic[6]) + "." +
            std::to_string(magic[7]) + " is not supported (1.0, 2.0, 3.0)";
    return false;
  }
  unsigned char lengthBytes[4] = {0, 0, 0, 0};
  size_t lengthSize = magic[6] == 1 ? 2 : 4;
  in.read(reinterpret_cast<char *>(lengthBytes),
          static_cast<std::streamsize>(lengthSize));
  uint64_t headerLen = lengthBytes[0] | lengthBytes[1] << 8 |
                       uint64_t(lengthBytes[2]) << 16 |
                       uint64_t(lengthBytes[3]) << 24;
  const std::streamoff dataStart =
      static_cast<std::streamoff>(8 + lengthSize + headerLen);
  if (!in || dataStart > fileSize) {
    error = path + ": truncated header (the file has " +
            std::to_string(fileSize) + " bytes)";
    return false;
  }
  std::string header(headerLen, ' ');
  in.read(header.data(), static_cast<std::streamsize>(headerLen));
  NpyHeader parsed(header);
  if (!parsed.parse(error)) {
    error = path + ": malformed .npy header: " + error;
    return false;
  }
  bool known = false;
  for (const rt::DTypeInfo &d : rt::kDTypes)
    if (d.npyDescr && parsed.descr == d.npyDescr) {
      out.dtype = d.type;
      known = true;
      break;
    }
  if (!known) {
    std::string supported;
    for (const rt::DTypeInfo &d : rt::kDTypes)
      if (d.npyDescr)
        supported += std::string(supported.empty() ? "" : ", ") + d.npyDescr;
    error = path + ": unsupported dtype '" + parsed.descr + "' (" +
            (parsed.descr.size() > 1 && parsed.descr[0] == '>' ? "big-endian; "
                                                               : "") +
            "supported: " + supported + ")";
    return false;
  }
  if (parsed.fortranOrder) {
    error = path + ": Fortran order is not supported (save a C-order array, "
                   "numpy.ascontiguousarray)";
    return false;
  }
  // The data's size from the header, checked against the file before
  // anything is allocated.
  uint64_t bytes = rt::dtypeSize(out.dtype);
  bool overflow = false;
  for (int64_t d : parsed.shape) {
    if (d == 0) {
      bytes = 0;
      overflow = false;
      break;
    }
    if (bytes > std::numeric_limits<uint64_t>::max() / uint64_t(d))
      overflow = true;
    else
      bytes *= uint64_t(d);
  }
  uint64_t remaining = static_cast<uint64_t>(fileSize - dataStart);
  if (overflow || bytes != remaining) {
    std::string shapeText;
    for (int64_t d : parsed.shape)
      shapeText += (shapeText.empty() ? "" : ", ") + std::to_string(d);
    error =
        path + ": " +
        (overflow || bytes > remaining ? "truncated data" : "trailing data") +
        ": the header's " + parsed.descr + " shape (" + shapeText + ") needs " +
        (overflow ? "more than 2^64" : std::to_string(bytes)) +
        " bytes, the file has " + std::to_string(remaining) +
        " after the header";
    return false;
  }
  out.shape = std::move(parsed.shape);
  out.data.resize(bytes);
  in.read(out.data.data(), static_cast<std::streamsize>(bytes));
  if (!in) {
    error = path + ": cannot read its data";
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
      error = "cannot write " + path + ": " + std::strerror(errno);
      return false;
    }
    out.write("\x93NUMPY\x01\x00", 8);
    uint16_t len = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char *>(&len), 2);
    out.write(header.data(), header.size());
    out.write(t.data.data(), t.data.size());
    out.close();
    if (!out) {
      error = "cannot write " + path + ": " + std::strerror(errno);
      std::remove(partial.c_str());
      return false;
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + partial + " to " + path + ": " +
            std::strerror(errno);
    std::remove(partial.c_str());
    return false;
  }
  return true;
}
