// SPDX-License-Identifier: Apache-2.0
#include "worker/train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "worker/safetensors/safetensors.h"

namespace fp8::train {
namespace fs = std::filesystem;
namespace st = fp8::safetensors;

namespace {

Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return InternalError("open " + path + " for fsync failed");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return InternalError("fsync " + path + " failed");
  return OkStatus();
}

// step-N → N, or -1.
int64_t StepOf(const fs::path& p) {
  const std::string name = p.filename().string();
  if (!name.starts_with("step-")) return -1;
  char* end = nullptr;
  const long long n = std::strtoll(name.c_str() + 5, &end, 10);
  return (*end == '\0' && end != name.c_str() + 5) ? n : -1;
}

std::vector<std::pair<int64_t, fs::path>> ListSteps(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t n = StepOf(e.path());
    if (n >= 0 && fs::exists(e.path() / "trainer_state.json", ec)) out.emplace_back(n, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ".step-N.tmp-PID" / ".step-N.old-PID" → PID, or -1 for any other name.
int64_t WriterPidOf(const fs::path& p) {
  const std::string name = p.filename().string();
  if (!name.starts_with(".step-")) return -1;
  size_t at = name.rfind(".tmp-");
  if (at == std::string::npos) at = name.rfind(".old-");
  if (at == std::string::npos) return -1;
  char* end = nullptr;
  const char* digits = name.c_str() + at + 5;
  const long long pid = std::strtoll(digits, &end, 10);
  return (*end == '\0' && end != digits && pid > 0) ? pid : -1;
}

// Removes a checkpoint's temporary directory unless it was renamed into place: every error
// path of SaveCheckpoint leaves nothing behind (each retry would otherwise leave another copy
// of the model, filling the disk sooner).
class TempDirGuard {
 public:
  explicit TempDirGuard(fs::path dir) : dir_(std::move(dir)) {}
  ~TempDirGuard() {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Release() { dir_.clear(); }

 private:
  fs::path dir_;
};

Status ErrnoError(const std::string& what, int err) {
  const std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOTDIR:
    case EEXIST:
    case ENOENT:
      return InvalidArgumentError(msg);
    default:
      return UnavailableError(msg);
  }
}

}  // namespace

Status PrepareCheckpointDir(const std::string& checkpoint_dir) {
  std::error_code ec;
  fs::create_directories(checkpoint_dir, ec);
  if (ec) return ErrnoError("cannot create " + checkpoint_dir, ec.value());
  for (const auto& e : fs::directory_iterator(checkpoint_dir, ec)) {
    const int64_t pid = WriterPidOf(e.path());
    if (pid < 0) continue;
    // A writer that still runs (another rank's process, in a misconfigured shared dir) keeps
    // its directory; ours cannot be in the middle of a write yet.
    const bool alive = pid != ::getpid() && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (alive) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) std::fprintf(stderr, "fp8-worker: removed stale %s\n", e.path().c_str());
  }
  const std::string probe = (fs::path(checkpoint_dir) / (".probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("cannot write in " + checkpoint_dir, errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return OkStatus();
}

StatusOr<std::string> Fnv1a64File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  uint64_t h = 0xcbf29ce484222325ULL;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buf[static_cast<size_t>(i)]);
      h *= 0x100000001b3ULL;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return std::string(hex);
}

StatusOr<SavedCheckpoint> SaveCheckpoint(const std::string& checkpoint_dir, int64_t step,
                                         const CausalLm& model, const AdamW& opt,
                                         const nlohmann::json& state, int keep) {
  std::error_code ec;
  fs::create_directories(checkpoint_dir, ec);
  if (ec) return InternalError("cannot create " + checkpoint_dir + ": " + ec.message());
  const fs::path root = fs::absolute(checkpoint_dir);
  const fs::path final_dir = root / ("step-" + std::to_string(step));
  const fs::path tmp_dir = root / (".step-" + std::to_string(step) + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp_dir, ec);
  TempDirGuard guard(tmp_dir);
  fs::create_directories(tmp_dir, ec);
  if (ec) return InternalError("cannot create " + tmp_dir.string() + ": " + ec.message());

  const std::vector<float>& params = model.params();
  std::vector<st::TensorData> weights;
  for (const ParamTensor& t : model.tensors())
    weights.push_back({t.name, st::DType::F32, t.shape, params.data() + t.offset, sizeof(float) * t.numel});
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", std::to_string(step)}};
  FP8_RETURN_IF_ERROR(st::WriteFile((tmp_dir / "model.safetensors").string(), weights, meta));

  const std::vector<float> m = opt.m(), v = opt.v();
  std::vector<st::TensorData> moments;
  for (const ParamTensor& t : model.tensors()) {
    moments.push_back({"exp_avg." + t.name, st::DType::F32, t.shape, m.data() + t.offset, sizeof(float) * t.numel});
    moments.push_back({"exp_avg_sq." + t.name, st::DType::F32, t.shape, v.data() + t.offset, sizeof(float) * t.numel});
  }
  FP8_RETURN_IF_ERROR(st::WriteFile((tmp_dir / "optimizer.safetensors").string(), moments,
                                    {{"bf16_moments", opt.bf16_moments() ? "true" : "false"}}));
  FP8_RETURN_IF_ERROR(st::WriteFileAtomically((tmp_dir / "trainer_state.json").string(), state.dump(1)));
  FP8_RETURN_IF_ERROR(FsyncPath(tmp_dir.string()));

  // A checkpoint of the same step may exist (a resumed run saving again): move it aside first,
  // since rename() cannot replace a non-empty directory.
  if (fs::exists(final_dir)) {
    const fs::path old = root / (".step-" + std::to_string(step) + ".old-" + std::to_string(::getpid()));
    fs::rename(final_dir, old, ec);
    if (ec) return InternalError("cannot move aside " + final_dir.string() + ": " + ec.message());
    fs::remove_all(old, ec);
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return InternalError("rename " + tmp_dir.string() + " → " + final_dir.string() + ": " + ec.message());
  guard.Release();
  FP8_RETURN_IF_ERROR(FsyncPath(root.string()));

  SavedCheckpoint saved;
  saved.path = final_dir.string();
  FP8_ASSIGN_OR_RETURN(saved.checksum, Fnv1a64File((final_dir / "model.safetensors").string()));

  auto steps = ListSteps(root.string());
  if (keep > 0 && static_cast<int>(steps.size()) > keep) {
    // Never the one just written (an output dir may hold later steps of an earlier run).
    for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i)
      if (steps[i].first != step) fs::remove_all(steps[i].second, ec);
  }
  return saved;
}

StatusOr<std::string> FindCheckpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return NotFoundError("no checkpoint directory " + path);
  if (fs::exists(fs::path(path) / "trainer_state.json", ec)) return fs::absolute(path).string();
  auto steps = ListSteps(path);
  if (steps.empty()) return NotFoundError("no complete checkpoint (step-N/trainer_state.json) in " + path);
  return fs::absolute(steps.back().second).string();
}

StatusOr<nlohmann::json> LoadCheckpoint(const std::string& step_dir, CausalLm* model, AdamW* opt) {
  const fs::path dir(step_dir);
  std::ifstream in(dir / "trainer_state.json");
  if (!in) return NotFoundError("cannot read " + (dir / "trainer_state.json").string());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json state = nlohmann::json::parse(ss.str(), nullptr, false);
  if (state.is_discarded() || !state.is_object() || !state.contains("step"))
    return DataLossError((dir / "trainer_state.json").string() + ": not a trainer state");

  auto load = [&](const std::string& file, const std::string& prefix, float* dst) -> Status {
    FP8_ASSIGN_OR_RETURN(st::Reader r, st::Reader::Open((dir / file).string()));
    for (const ParamTensor& t : model->tensors()) {
      const st::TensorInfo* info = r.Find(prefix + t.name);
      if (!info) return DataLossError(file + ": missing tensor " + prefix + t.name);
      if (info->dtype != st::DType::F32 || info->shape != t.shape)
        return DataLossError(file + ": tensor " + prefix + t.name + " has another dtype or shape than the model");
      FP8_RETURN_IF_ERROR(r.ReadInto(prefix + t.name, dst + t.offset, sizeof(float) * t.numel));
    }
    return OkStatus();
  };
  FP8_RETURN_IF_ERROR(load("model.safetensors", "", model->params().data()));
  std::vector<float> m(model->params().size()), v(model->params().size());
  FP8_RETURN_IF_ERROR(load("optimizer.safetensors", "exp_avg.", m.data()));
  FP8_RETURN_IF_ERROR(load("optimizer.safetensors", "exp_avg_sq.", v.data()));
  opt->Restore(m, v);
  if (state.contains("fp8_scaling")) FP8_RETURN_IF_ERROR(model->RestorePrecisionState(state["fp8_scaling"]));
  return state;
}

}  // namespace fp8::train
