// SPDX-License-Identifier: Apache-2.0
#include "worker/train/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "tensorboard/event.pb.h"

namespace fp8::train {
namespace {

using fp8d::v1::WorkerEvent;

// Byte-at-a-time table for the reflected Castagnoli polynomial; a few hundred bytes per step
// need nothing faster.
constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Sanitized(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                    c == '-';
    if (!ok) c = '_';
  }
  if (out.empty() || out == "." || out == "..") out = "run";
  return out;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(const std::string& data) {
  // TFRecord's integers are little-endian, as this machine's are (x86-64 and aarch64 Linux).
  static_assert(std::endian::native == std::endian::little);
  const uint64_t len = data.size();
  std::string out(reinterpret_cast<const char*>(&len), 8);
  const uint32_t len_crc = MaskedCrc32c(&len, 8);
  out.append(reinterpret_cast<const char*>(&len_crc), 4);
  out += data;
  const uint32_t data_crc = MaskedCrc32c(data.data(), data.size());
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

std::string TensorBoardRunDir(const std::string& output_dir, const std::map<std::string, std::string>& env,
                              const std::string& hostname, int64_t unix_time) {
  std::string run;
  if (auto it = env.find("FP8D_JOB"); it != env.end() && !it->second.empty()) {
    run = it->second;
  } else {
    const std::time_t t = static_cast<std::time_t>(unix_time);
    std::tm tm{};
    ::localtime_r(&t, &tm);
    char date[32];
    std::strftime(date, sizeof(date), "%b%d_%H-%M-%S", &tm);  // the Trainer's runs/<date>_<host>
    run = std::string(date) + "_" + hostname;
  }
  return (std::filesystem::path(output_dir) / "runs" / Sanitized(run)).string();
}

std::vector<std::pair<std::string, double>> ProgressScalars(const WorkerEvent::Progress& p) {
  std::vector<std::pair<std::string, double>> s = {
      {"train/loss", p.loss()},
      {"train/learning_rate", p.lr()},
      {"train/grad_norm", p.grad_norm()},
      {"train/tokens_per_second", p.tokens_per_sec()},
  };
  if (p.mfu() != 0) s.emplace_back("train/mfu", p.mfu());
  if (p.has_fp8_amax_max()) s.emplace_back("train/fp8_amax_max", p.fp8_amax_max());
  if (p.has_fp8_saturation_fraction()) s.emplace_back("train/fp8_saturation_fraction", p.fp8_saturation_fraction());
  if (p.has_moe_load_min()) s.emplace_back("train/moe_load_min", p.moe_load_min());
  if (p.has_moe_load_max()) s.emplace_back("train/moe_load_max", p.moe_load_max());
  if (p.has_moe_load_cv()) s.emplace_back("train/moe_load_cv", p.moe_load_cv());
  if (p.has_moe_dropped_fraction()) s.emplace_back("train/moe_dropped_fraction", p.moe_dropped_fraction());
  if (p.has_moe_aux_loss()) s.emplace_back("train/moe_aux_loss", p.moe_aux_loss());
  return s;
}

StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& run_dir,
                                                                    const std::string& hostname, int64_t unix_time,
                                                                    int64_t first_step) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return InternalError("tensorboard: cannot create " + run_dir + ": " + ec.message());
  // O_EXCL: two attempts that start in the same second on one host get two files, not one
  // interleaved one.
  const std::string base = run_dir + "/events.out.tfevents." + std::to_string(unix_time) + "." + Sanitized(hostname);
  std::string path = base;
  int fd = -1;
  for (int n = 1; n <= 100; ++n) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
    path = base + "." + std::to_string(n);
  }
  if (fd < 0) return InternalError("tensorboard: cannot create " + path + ": " + std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    ::close(fd);
    return InternalError("tensorboard: fdopen " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(f, path));
  fp8d::tensorboard::Event version;
  version.set_wall_time(WallTime());
  version.set_file_version("brain.Event:2");
  FP8_RETURN_IF_ERROR(w->WriteEvent(version.SerializeAsString()));
  fp8d::tensorboard::Event start;
  start.set_wall_time(WallTime());
  start.set_step(first_step);
  start.mutable_session_log()->set_status(fp8d::tensorboard::SessionLog::START);
  FP8_RETURN_IF_ERROR(w->WriteEvent(start.SerializeAsString()));
  return w;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status TensorBoardWriter::WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  fp8d::tensorboard::Event ev;
  ev.set_wall_time(WallTime());
  ev.set_step(step);
  for (const auto& [tag, value] : scalars) {
    fp8d::tensorboard::Summary::Value* v = ev.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteEvent(ev.SerializeAsString());
}

Status TensorBoardWriter::WriteEvent(const std::string& serialized_event) {
  const std::string record = TfRecord(serialized_event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    return InternalError("tensorboard: write " + path_ + ": " + std::strerror(errno));
  return OkStatus();
}

}  // namespace fp8::train
