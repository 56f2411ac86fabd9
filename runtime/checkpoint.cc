// Checkpoint files: ckpt-<step>.npz holds the tensors ("param/<name>", "state/<name>"),
// ckpt-<step>.json the metadata plus the npz's size and hash, `latest` the newest stem.
// Note [Checkpoint commit order]: npz, then json, then latest, each fsynced and renamed.
#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "runtime/data/npy.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace omt {
namespace {

constexpr const char* kFormat = "onnx-mirror-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kParamPrefix = "param/";
constexpr const char* kStatePrefix = "state/";

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string stem_for(int64_t step) { return "ckpt-" + std::to_string(step); }

// The step of "ckpt-<digits>", or -1 when `stem` is not of that form.
int64_t step_of_stem(const std::string& stem) {
  if (stem.size() <= 5 || stem.compare(0, 5, "ckpt-") != 0 || stem.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < stem.size(); ++i) {
    if (stem[i] < '0' || stem[i] > '9') return -1;
    step = step * 10 + (stem[i] - '0');
  }
  return step;
}

// Steps of the complete-looking checkpoints (with a .json) in `dir`, ascending.
std::vector<int64_t> list_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    if (p.extension() != ".json") continue;
    const int64_t s = step_of_stem(p.stem().string());
    if (s >= 0) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Names the checkpoints in `dir` other than `except` (newest first), to resume from instead.
std::string available_hint(const std::string& dir, int64_t except = -1) {
  std::string names;
  const std::vector<int64_t> steps = list_steps(dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    if (*it != except) names += (names.empty() ? "" : ", ") + stem_for(*it) + ".json";
  const char* other = except >= 0 ? "other " : "";
  if (names.empty()) return str_cat(" There is no ", other, "ckpt-<step>.json in '", dir, "'.");
  return str_cat(" The ", other, "checkpoints in '", dir, "', newest first: ", names,
                 "; resume from one of them by path.");
}

// fsync a folder so the renames inside it survive a crash. Some file systems refuse (EINVAL).
void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  OMT_CHECK(fd >= 0, kIo, "cannot open checkpoint folder '", dir, "': ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  OMT_CHECK(rc == 0 || err == EINVAL || err == ENOTSUP, kIo, "fsync of checkpoint folder '", dir,
            "' failed: ", std::strerror(err));
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OMT_CHECK(fd >= 0, kIo, "cannot reopen '", path, "': ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  OMT_CHECK(rc == 0, kIo, "fsync of '", path, "' failed: ", std::strerror(err));
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

std::string signature_str(DType dtype, const Shape& shape) {
  return str_cat(dtype_name(dtype), shape_str(shape));
}

[[noreturn]] void corrupt(const std::string& file, const std::string& what,
                          const std::string& dir) {
  OMT_FAIL(kInvalidArgument, "checkpoint '", file, "' is corrupt or truncated: ", what, ".",
           available_hint(dir, step_of_stem(fs::path(file).stem().string())));
}

// Writes the tensors to `final_path` through a temporary name, fsynced before the rename.
// write_npz renames its own temporary into place but does not fsync, hence the extra step.
// Returns (size, hash) of the bytes written.
std::pair<uint64_t, std::string> write_tensors(const std::string& final_path,
                                               const NamedTensors& arrays) {
  const std::string tmp = str_cat(final_path, ".partial.", ::getpid());
  try {
    write_npz(tmp, arrays);
    const std::string bytes = read_file_bytes(tmp, "checkpoint");
    fsync_file(tmp);
    OMT_CHECK(::rename(tmp.c_str(), final_path.c_str()) == 0, kIo, "cannot move '", tmp,
              "' to '", final_path, "': ", std::strerror(errno));
    return {bytes.size(), hex64(fnv1a(bytes.data(), bytes.size()))};
  } catch (...) {
    remove_quietly(tmp);
    remove_quietly(str_cat(tmp, ".tmp.", ::getpid()));  // write_npz's own temporary
    throw;
  }
}

json checkpoint_json(const Checkpoint& c, const std::string& npz_name, uint64_t npz_bytes,
                     const std::string& npz_hash) {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model_fingerprint"] = c.model_fingerprint;
  j["step"] = c.step;
  j["epoch"] = c.epoch;
  j["step_in_epoch"] = c.step_in_epoch;
  j["seed"] = c.seed;
  j["rng_state"] = c.rng_state;
  j["meta"] = c.meta;
  j["tensors"] = {{"file", npz_name}, {"bytes", npz_bytes}, {"fnv1a64", npz_hash},
                  {"params", c.params.names()}, {"state", c.state.names()}};
  return j;
}

// Keeps `current` and the keep_last - 1 newest other checkpoints; failures are ignored (the new
// checkpoint is already safe, and a leftover old one does no harm).
void prune(const std::string& dir, int64_t current, int keep_last) {
  if (keep_last <= 0) return;
  std::vector<int64_t> others;
  std::error_code ec;
  std::set<int64_t> seen;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    if (p.extension() != ".json" && p.extension() != ".npz") continue;
    const int64_t s = step_of_stem(p.stem().string());
    if (s >= 0 && s != current && seen.insert(s).second) others.push_back(s);
  }
  std::sort(others.rbegin(), others.rend());
  for (size_t i = static_cast<size_t>(keep_last - 1); i < others.size(); ++i) {
    // json first: a checkpoint without its json is never loaded, one without its npz would be.
    remove_quietly((fs::path(dir) / (stem_for(others[i]) + ".json")).string());
    remove_quietly((fs::path(dir) / (stem_for(others[i]) + ".npz")).string());
  }
}

}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& dir, bool own_pid_dead) {
  static const std::regex kTemporary(R"(^(ckpt-[0-9]+\.(npz|json)|latest)((\.partial|\.tmp)\.[0-9]{1,9}){1,2}(\.[A-Za-z0-9]{6})?$)");
  static const std::regex kPid(R"(\.(partial|tmp)\.([0-9]+))");
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, kTemporary)) continue;
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    bool dead = true;
    for (std::sregex_iterator m(name.begin(), name.end(), kPid), done; m != done && dead; ++m) {
      dead = writer_is_gone(std::stol((*m)[2].str()), own_pid_dead);
    }
    std::error_code rm;
    if (dead && fs::remove(it->path(), rm)) removed.push_back(it->path().string());
  }
  return removed;
}

std::vector<ParamSignature> param_signatures(const NamedTensors& params) {
  std::vector<ParamSignature> out;
  out.reserve(params.size());
  for (const auto& name : params.names())
    out.push_back({name, params.at(name).dtype(), params.at(name).shape()});
  return out;
}

std::string model_fingerprint(const std::vector<ParamSignature>& params) {
  std::vector<const ParamSignature*> sorted;
  for (const auto& p : params) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamSignature* a, const ParamSignature* b) { return a->name < b->name; });
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const ParamSignature* p : sorted) {
    // name NUL dtype shape ';' cannot be confused across parameters (names hold no NUL).
    const std::string entry =
        str_cat(p->name, std::string(1, '\0'), static_cast<int>(p->dtype), shape_str(p->shape), ";");
    h = fnv1a(entry.data(), entry.size(), h);
  }
  return "v1:" + hex64(h);
}

std::string save_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep_last) {
  OMT_CHECK(ckpt.step >= 0, kInvalidArgument, "checkpoint step must be >= 0, got ", ckpt.step);
  OMT_CHECK(!dir.empty(), kInvalidArgument, "the checkpoint folder name is empty");
  NamedTensors arrays;
  for (const auto* group : {&ckpt.params, &ckpt.state}) {
    const char* prefix = group == &ckpt.params ? kParamPrefix : kStatePrefix;
    for (const auto& name : group->names()) {
      const Tensor& t = group->at(name);
      OMT_CHECK(t.defined(), kInvalidArgument, "checkpoint tensor '", prefix, name,
                "' is undefined");
      OMT_CHECK(t.device().kind == DeviceKind::kCpu, kInvalidArgument, "checkpoint tensor '",
                prefix, name, "' is on ", t.device().str(), "; copy it to the host first");
      try {
        serialize_npy(Tensor::zeros(t.dtype(), {0}));  // is the dtype storable at all?
      } catch (const Error& e) {
        OMT_FAIL(kUnsupported, "checkpoint tensor '", prefix, name, "' (", t.describe(),
                 ") cannot be saved: ", e.what());
      }
      arrays.set(prefix + name, t);
    }
  }
  const std::string stem = stem_for(ckpt.step);
  const std::string npz_path = (fs::path(dir) / (stem + ".npz")).string();
  const std::string json_path = (fs::path(dir) / (stem + ".json")).string();

  std::error_code ec;
  fs::create_directories(dir, ec);
  OMT_CHECK(!ec, kIo, "cannot create checkpoint folder '", dir, "': ", ec.message(),
            ". Pass a writable --checkpoint-dir.");
  OMT_CHECK(fs::is_directory(dir), kIo, "checkpoint folder '", dir,
            "' exists but is not a folder. Pass another --checkpoint-dir.");
  remove_stale_temporaries(dir);  // Note [Stale temporaries]

  // Note [Checkpoint commit order]: `latest` is the commit point. A crash before it leaves the
  // previous checkpoint current; the npz is named in the json with its size and hash, so a torn
  // pair is detected on load instead of being trained from.
  bool wrote_npz = false, wrote_json = false;
  try {
    const auto [bytes, hash] = write_tensors(npz_path, arrays);
    wrote_npz = true;
    std::string text;
    try {
      text = checkpoint_json(ckpt, stem + ".npz", bytes, hash).dump(2) + "\n";
    } catch (const json::exception& e) {
      OMT_FAIL(kInvalidArgument, "checkpoint metadata cannot be written as JSON (", e.what(),
               "); rng_state and meta must be UTF-8 text");
    }
    write_file_atomic(json_path, text);
    wrote_json = true;
    fsync_dir(dir);
    write_file_atomic((fs::path(dir) / "latest").string(), stem + "\n");
    fsync_dir(dir);
  } catch (const Error& e) {
    if (wrote_json) remove_quietly(json_path);
    if (wrote_npz) remove_quietly(npz_path);
    throw Error(e.kind(), str_cat("saving checkpoint ", stem, " in '", dir, "' failed: ",
                                  e.what()));
  }
  prune(dir, ckpt.step, keep_last);
  return json_path;
}

Checkpoint load_checkpoint(const std::string& dir_or_file) {
  std::error_code ec;
  std::string json_path;
  if (fs::is_directory(dir_or_file, ec)) {
    const std::string latest = (fs::path(dir_or_file) / "latest").string();
    OMT_CHECK(file_exists(latest), kIo, "no checkpoint in '", dir_or_file,
              "': it has no 'latest' file.", available_hint(dir_or_file));
    std::string stem = read_file_bytes(latest, "checkpoint pointer");
    while (!stem.empty() && (stem.back() == '\n' || stem.back() == '\r' || stem.back() == ' '))
      stem.pop_back();
    if (step_of_stem(stem) < 0)
      corrupt(latest, "it should hold a name like 'ckpt-1200', it holds '" + stem + "'",
              dir_or_file);
    json_path = (fs::path(dir_or_file) / (stem + ".json")).string();
  } else {
    fs::path p(dir_or_file);
    if (p.extension() == ".npz") p.replace_extension(".json");
    else if (p.extension() != ".json") p += ".json";
    json_path = p.string();
  }
  const fs::path json_fs(json_path);
  const std::string dir = json_fs.has_parent_path() ? json_fs.parent_path().string() : ".";
  OMT_CHECK(file_exists(json_path), kIo, "no checkpoint at '", dir_or_file, "': '", json_path,
            "' does not exist.", available_hint(dir));

  const json j = json::parse(read_file_bytes(json_path, "checkpoint"), nullptr, false);
  if (j.is_discarded()) corrupt(json_path, "it is not valid JSON", dir);
  Checkpoint c;
  c.source = json_path;
  std::string npz_name, npz_hash;
  uint64_t npz_bytes = 0;
  std::vector<std::string> param_names, state_names;
  try {
    if (!j.is_object() || !j.contains("format") || j.at("format") != kFormat)
      corrupt(json_path, str_cat("it is not an onnx-mirror checkpoint (no \"format\": \"",
                                 kFormat, "\")"), dir);
    const int version = j.at("version").get<int>();
    OMT_CHECK(version == kVersion, kUnsupported, "checkpoint '", json_path,
              "' has format version ", version, "; this build reads version ", kVersion,
              ". Use the onnx-mirror that wrote it.");
    c.model_fingerprint = j.at("model_fingerprint").get<std::string>();
    c.step = j.at("step").get<int64_t>();
    c.epoch = j.at("epoch").get<int64_t>();
    c.step_in_epoch = j.at("step_in_epoch").get<int64_t>();
    c.seed = j.at("seed").get<uint64_t>();
    c.rng_state = j.at("rng_state").get<std::string>();
    c.meta = j.at("meta").get<std::map<std::string, std::string>>();
    const json& t = j.at("tensors");
    npz_name = t.at("file").get<std::string>();
    npz_bytes = t.at("bytes").get<uint64_t>();
    npz_hash = t.at("fnv1a64").get<std::string>();
    param_names = t.at("params").get<std::vector<std::string>>();
    state_names = t.at("state").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    corrupt(json_path, str_cat("a field is missing or has the wrong type (", e.what(), ")"), dir);
  }
  if (npz_name.find('/') != std::string::npos || npz_name.empty())
    corrupt(json_path, "it names an invalid tensor file '" + npz_name + "'", dir);

  const std::string npz_path = (fs::path(dir) / npz_name).string();
  OMT_CHECK(file_exists(npz_path), kIo, "checkpoint '", json_path, "' is incomplete: its tensor file '",
            npz_path, "' is missing.", available_hint(dir, step_of_stem(json_fs.stem().string())));
  {
    const std::string bytes = read_file_bytes(npz_path, "checkpoint");
    if (bytes.size() != npz_bytes)
      corrupt(npz_path, str_cat("it has ", bytes.size(), " bytes, the checkpoint recorded ",
                                npz_bytes), dir);
    if (hex64(fnv1a(bytes.data(), bytes.size())) != npz_hash)
      corrupt(npz_path, "its contents do not match the hash recorded in " + json_path, dir);
  }
  const NamedTensors arrays = read_npz(npz_path);
  for (const auto& name : arrays.names()) {
    if (name.rfind(kParamPrefix, 0) == 0)
      c.params.set(name.substr(std::strlen(kParamPrefix)), arrays.at(name));
    else if (name.rfind(kStatePrefix, 0) == 0)
      c.state.set(name.substr(std::strlen(kStatePrefix)), arrays.at(name));
    else
      corrupt(npz_path, "it holds an array '" + name + "' outside param/ and state/", dir);
  }
  if (c.params.names() != param_names || c.state.names() != state_names)
    corrupt(npz_path, "its arrays are not the ones listed in " + json_path, dir);
  return c;
}

void set_checkpoint_optimizer(Checkpoint& ckpt, OptimizerKind kind) { ckpt.meta["optimizer"] = optimizer_kind_name(kind); }

std::optional<OptimizerKind> checkpoint_optimizer(const Checkpoint& ckpt) {
  const auto it = ckpt.meta.find("optimizer");
  if (it == ckpt.meta.end()) return std::nullopt;
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW})
    if (it->second == optimizer_kind_name(k) || it->second == std::to_string(static_cast<int>(k)))
      return k;  // the name, or the integer of Note [Optimizer in checkpoints]
  return std::nullopt;
}

void check_compatible(const Checkpoint& ckpt, const std::string& fingerprint,
                      const std::vector<ParamSignature>& params) {
  const std::string where = ckpt.source.empty() ? std::string("the checkpoint")
                                                : "checkpoint '" + ckpt.source + "'";
  std::vector<std::string> problems;
  std::set<std::string> in_model;
  for (const auto& p : params) {
    in_model.insert(p.name);
    if (!ckpt.params.has(p.name)) {
      problems.push_back(str_cat("the model's parameter '", p.name, "' (",
                                 signature_str(p.dtype, p.shape), ") is missing from it"));
      continue;
    }
    const Tensor& t = ckpt.params.at(p.name);
    if (t.dtype() != p.dtype || t.shape() != p.shape)
      problems.push_back(str_cat("parameter '", p.name, "' is ", signature_str(t.dtype(), t.shape()),
                                 " in it but ", signature_str(p.dtype, p.shape), " in the model"));
  }
  for (const auto& name : ckpt.params.names())
    if (!in_model.count(name))
      problems.push_back(str_cat("it has parameter '", name, "' (",
                                 signature_str(ckpt.params.at(name).dtype(), ckpt.params.at(name).shape()),
                                 ") that the model does not have"));
  if (!problems.empty()) {
    const std::string more =
        problems.size() > 1 ? str_cat(" (and ", problems.size() - 1, " more mismatches)") : "";
    OMT_FAIL(kInvalidArgument, where, " does not fit this model: ", problems.front(), more,
             "; this checkpoint belongs to a different model. Resume from a checkpoint of this "
             "model, or train from scratch without --resume.");
  }
  OMT_CHECK(ckpt.model_fingerprint == fingerprint, kInvalidArgument, where,
            " has model fingerprint ", ckpt.model_fingerprint, " but the model's is ", fingerprint,
            " although every parameter matches by name, dtype and shape; this checkpoint belongs "
            "to a different model. Resume from a checkpoint of this model.");
}

}  // namespace omt
