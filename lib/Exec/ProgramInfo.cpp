//===- ProgramInfo.cpp - The program description artifacts embed ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/ProgramInfo.h"
#include "shardx/Layout/LayoutJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

using namespace shardx;
using namespace shardx::exec;
using Json = nlohmann::json;

std::vector<int64_t> ProgramInfo::getMeshShape() const {
  if (meshes.empty())
    return {1};
  return meshes.front().shape;
}

std::string shardx::exec::describeFailedCheck(const EntryPoint &entry,
                                              int64_t code) {
  if (code == 0)
    return "";
  std::string of = " of " + std::to_string(entry.checks.size());
  if (code < 1 || code > static_cast<int64_t>(entry.checks.size()))
    return "index check code " + std::to_string(code) + " of " + entry.name +
           ", which has " + std::to_string(entry.checks.size()) +
           " checks (a ShardX bug)";
  const IndexCheck &check = entry.checks[static_cast<size_t>(code - 1)];
  return "index check " + std::to_string(code) + of +
         " failed: " + check.exception + ": " + check.message;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

static Json specToJson(const TensorSpec &spec) {
  Json obj = Json::object();
  obj["shape"] = spec.shape;
  obj["global_shape"] = spec.globalShape;
  obj["dtype"] = rt::stringifyDType(spec.dtype);
  if (spec.layout) {
    Json layout = layoutToJson(*spec.layout);
    layout["text"] = spec.layoutText;
    obj["layout"] = std::move(layout);
  }
  return obj;
}

std::string shardx::exec::writeProgramInfo(const ProgramInfo &info) {
  Json root = Json::object();
  root["version"] = 1;
  Json meshes = Json::array();
  for (const MeshInfo &mesh : info.meshes)
    meshes.push_back(Json{{"name", mesh.name}, {"shape", mesh.shape}});
  root["meshes"] = std::move(meshes);
  Json functions = Json::array();
  for (const EntryPoint &entry : info.functions) {
    Json f = Json::object();
    f["name"] = entry.name;
    if (!entry.mesh.empty())
      f["mesh"] = entry.mesh;
    Json inputs = Json::array(), outputs = Json::array();
    for (const TensorSpec &spec : entry.inputs)
      inputs.push_back(specToJson(spec));
    for (const TensorSpec &spec : entry.outputs)
      outputs.push_back(specToJson(spec));
    f["inputs"] = std::move(inputs);
    f["outputs"] = std::move(outputs);
    if (entry.checkOutput >= 0) {
      Json checks = Json::array();
      for (const IndexCheck &check : entry.checks)
        checks.push_back(
            Json{{"exception", check.exception}, {"message", check.message}});
      f["index_checks"] =
          Json{{"output", entry.checkOutput}, {"checks", std::move(checks)}};
    }
    functions.push_back(std::move(f));
  }
  root["functions"] = std::move(functions);
  return root.dump();
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

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

/// "[8, 8]".
std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text;
  for (int64_t d : shape)
    text += (text.empty() ? "" : ", ") + std::to_string(d);
  return "[" + text + "]";
}

bool readSpec(const Json &obj, const std::vector<int64_t> &meshShape,
              TensorSpec &spec, std::string &error) {
  spec.shape = ints(obj, "shape");
  spec.globalShape = ints(obj, "global_shape");
  if (spec.globalShape.empty() && !spec.shape.empty())
    spec.globalShape = spec.shape;
  // What the executor allocates and distributes by: dims are sizes or -1
  // (dynamic), and the bytes of the static ones fit int64.
  bool dynamic = false;
  for (const std::vector<int64_t> *shape : {&spec.globalShape, &spec.shape}) {
    int64_t bytes = 8;
    for (int64_t d : *shape) {
      dynamic |= d == -1 && shape == &spec.globalShape;
      if (d < -1 ||
          (d > 0 && bytes > std::numeric_limits<int64_t>::max() / d)) {
        error = "shape " + shapeText(*shape) +
                " has a negative dim or too "
                "many elements";
        return false;
      }
      bytes *= std::max<int64_t>(d, 1);
    }
  }
  std::string dtype = stringOr(obj, "dtype", "");
  std::optional<rt::DType> parsed = rt::parseDType(dtype);
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
  if (static_cast<size_t>(layout->getMeshRank()) != meshShape.size()) {
    error = "layout " + spec.layoutText + " has " +
            std::to_string(layout->getMeshRank()) +
            " mesh axes, the program's mesh " +
            std::to_string(meshShape.size());
    return false;
  }
  // The executor computes every rank's shard of it.
  if (std::string why =
          dynamic ? layout->verifyForMesh(meshShape)
                  : layout->verifyForShape(meshShape, spec.globalShape);
      !why.empty()) {
    error = "layout " + spec.layoutText + " is invalid for global shape " +
            shapeText(spec.globalShape) + ": " + why;
    return false;
  }
  spec.layout = std::move(layout);
  return true;
}

/// The entry's `index_checks` (none when absent). Throws Json::exception
/// where a key is missing or mistyped.
bool readChecks(const Json &f, EntryPoint &entry, std::string &error) {
  auto it = f.find("index_checks");
  if (it == f.end())
    return true;
  int64_t output = it->at("output").get<int64_t>();
  for (const Json &c : it->at("checks"))
    entry.checks.push_back({c.at("exception").get<std::string>(),
                            c.at("message").get<std::string>()});
  if (output < 0 || output >= static_cast<int64_t>(entry.outputs.size()) ||
      entry.outputs[output].dtype != rt::DType::I64 ||
      !entry.outputs[output].globalShape.empty()) {
    error = "index_checks: output " + std::to_string(output) +
            " is not an i64 scalar output";
    return false;
  }
  if (entry.checks.empty()) {
    error = "index_checks: no checks listed";
    return false;
  }
  entry.checkOutput = output;
  return true;
}

} // namespace

bool shardx::exec::readProgramInfo(std::string_view text, ProgramInfo &info,
                                   std::string &error) {
  info = ProgramInfo();
  Json root = Json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    error = "not valid JSON";
    return false;
  }
  try {
    if (auto meshes = root.find("meshes");
        meshes != root.end() && meshes->is_array())
      for (const Json &m : *meshes) {
        MeshInfo mesh;
        mesh.name = stringOr(m, "name", "");
        for (const Json &s : m.at("shape"))
          mesh.shape.push_back(s.get<int64_t>());
        // The executor makes a rank per device: the bound shardx.mesh's
        // verifier enforces.
        if (!countMeshDevices(mesh.shape)) {
          error = "mesh '" + mesh.name + "' of shape " + shapeText(mesh.shape) +
                  " is not a mesh (positive axis sizes, at most " +
                  std::to_string(kMaxMeshDevices) + " devices)";
          return false;
        }
        info.meshes.push_back(std::move(mesh));
      }
    std::vector<int64_t> meshShape = info.getMeshShape();
    for (const Json &f : root.at("functions")) {
      EntryPoint e;
      e.name = stringOr(f, "name", "");
      e.mesh = stringOr(f, "mesh", "");
      for (const char *key : {"inputs", "outputs"})
        for (const Json &v : f.at(key)) {
          TensorSpec spec;
          if (!readSpec(v, meshShape, spec, error)) {
            error = e.name + ": " + error;
            return false;
          }
          (std::string(key) == "inputs" ? e.inputs : e.outputs).push_back(spec);
        }
      if (!readChecks(f, e, error)) {
        error = e.name + ": " + error;
        return false;
      }
      info.functions.push_back(std::move(e));
    }
  } catch (const Json::exception &e) {
    error = e.what();
    return false;
  }
  return true;
}
