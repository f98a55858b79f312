//===- LayoutJson.cpp - Layouts as JSON -----------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Layout/LayoutJson.h"

namespace shardx {

using Json = nlohmann::json;

Json layoutToJson(const Layout &layout) {
  Json dims = Json::array();
  for (const DimSharding &ds : layout.getDims()) {
    Json splits = Json::array();
    for (const Split &s : ds.splits)
      splits.push_back(Json::array({s.axis, s.stride}));
    dims.push_back(
        Json{{"dim", ds.dim}, {"splits", splits}, {"sizes", ds.sizes}});
  }
  Json partials = Json::array();
  for (const std::optional<ReduceOp> &p : layout.getPartials())
    partials.push_back(p ? Json(stringifyReduceOp(*p)) : Json(nullptr));
  return Json{{"dims", dims}, {"partials", partials}};
}

/// Reads `json[key]`, an array of integers, into `out`.
static bool readInts(const Json &json, const char *key,
                     std::vector<int64_t> &out, std::string &error) {
  auto it = json.find(key);
  if (it == json.end() || !it->is_array()) {
    error = std::string("'") + key + "' must be an array of integers";
    return false;
  }
  for (const Json &v : *it) {
    if (!v.is_number_integer()) {
      error = std::string("'") + key + "' must be an array of integers";
      return false;
    }
    out.push_back(v.get<int64_t>());
  }
  return true;
}

/// Reads one entry of "dims" into `layout`.
static bool readDim(const Json &entry, int64_t prevDim, Layout &layout,
                    std::string &error) {
  if (!entry.is_object()) {
    error = "each entry of 'dims' must be an object";
    return false;
  }
  auto dim = entry.find("dim");
  if (dim == entry.end() || !dim->is_number_integer()) {
    error = "a dim entry needs an integer 'dim'";
    return false;
  }
  int64_t d = dim->get<int64_t>();
  if (d < 0) {
    error = "dim " + std::to_string(d) + " is negative";
    return false;
  }
  if (d <= prevDim) {
    error = "'dims' must be sorted by dim, each dim once (dim " +
            std::to_string(d) + ")";
    return false;
  }
  auto splits = entry.find("splits");
  if (splits == entry.end() || !splits->is_array() || splits->empty()) {
    error = "dim " + std::to_string(d) + " needs a non-empty 'splits' array";
    return false;
  }
  for (const Json &s : *splits) {
    if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() ||
        !s[1].is_number_integer()) {
      error = "a split of dim " + std::to_string(d) +
              " must be an [axis, stride] pair of integers";
      return false;
    }
    layout.addSplit(d, Split{s[0].get<int64_t>(), s[1].get<int64_t>()});
  }
  std::vector<int64_t> sizes;
  if (entry.contains("sizes") && !readInts(entry, "sizes", sizes, error))
    return false;
  if (!sizes.empty())
    layout.setSizes(d, std::move(sizes));
  return true;
}

std::optional<Layout> layoutFromJson(const Json &json, std::string &error) {
  if (!json.is_object()) {
    error = "a layout must be a JSON object";
    return std::nullopt;
  }
  auto partials = json.find("partials");
  if (partials == json.end() || !partials->is_array()) {
    error = "a layout needs a 'partials' array, one entry per mesh axis";
    return std::nullopt;
  }
  Layout layout(static_cast<int64_t>(partials->size()));
  for (size_t axis = 0; axis < partials->size(); ++axis) {
    const Json &p = (*partials)[axis];
    if (p.is_null())
      continue;
    std::optional<ReduceOp> op =
        p.is_string() ? parseReduceOp(p.get<std::string>()) : std::nullopt;
    if (!op) {
      error = "partial of mesh axis " + std::to_string(axis) +
              " must be null or one of sum, avg, max, min, prod";
      return std::nullopt;
    }
    layout.setPartial(static_cast<int64_t>(axis), op);
  }
  auto dims = json.find("dims");
  if (dims == json.end() || !dims->is_array()) {
    error = "a layout needs a 'dims' array";
    return std::nullopt;
  }
  int64_t prevDim = -1;
  for (const Json &entry : *dims) {
    if (!readDim(entry, prevDim, layout, error))
      return std::nullopt;
    prevDim = entry["dim"].get<int64_t>();
  }
  if (std::string e = layout.verify(); !e.empty()) {
    error = "invalid layout: " + e;
    return std::nullopt;
  }
  return layout;
}

std::string layoutToJsonText(const Layout &layout) {
  return layoutToJson(layout).dump();
}

std::optional<Layout> layoutFromJsonText(const std::string &text,
                                         std::string &error) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    error = "not valid JSON";
    return std::nullopt;
  }
  return layoutFromJson(json, error);
}

} // namespace shardx
