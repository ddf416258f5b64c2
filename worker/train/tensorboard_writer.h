// SPDX-License-Identifier: Apache-2.0
// training.report_to: tensorboard. Rank 0 writes the run's scalars (loss, learning rate, grad
// norm, tokens/s, FP8 amax and saturation, MoE loads, eval loss) as a TensorBoard event file,
// <output_dir>/runs/<run>/events.out.tfevents.<unix time>.<hostname>, so `tensorboard --logdir
// <output_dir>/runs` shows an fp8d run as it shows a Hugging Face Trainer's. <run> is the fp8d
// job's name (FP8D_JOB): every attempt of a job adds its own file to the same run, and each
// file starts with a SessionLog START at the first step it will write, so TensorBoard drops
// what a failed attempt wrote past the checkpoint the retry resumed from (its reader purges the
// points at or after a START's step).
//
// The file is a TFRecord stream of Event protos (proto/tensorboard/event.proto): per record a
// little-endian uint64 length, the masked CRC32C of those 8 bytes, the data, and the masked
// CRC32C of the data. It is flushed after every step, so a running job's curves show.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/worker_event.pb.h"

namespace fp8::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as TFRecord frames use it.
uint32_t Crc32c(const void* data, size_t n);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskedCrc32c(const void* data, size_t n);
// One framed record holding `data`.
std::string TfRecord(const std::string& data);

// The run's folder: <output_dir>/runs/<FP8D_JOB>, or, outside fp8d, <date>_<host> as the
// Hugging Face Trainer names it. Characters other than [A-Za-z0-9._-] become '_'.
std::string TensorBoardRunDir(const std::string& output_dir, const std::map<std::string, std::string>& env,
                              const std::string& hostname, int64_t unix_time);

// The scalar tags of one progress event, in the order they are written: train/loss,
// train/learning_rate, train/grad_norm, train/tokens_per_second, and when the event has them
// train/mfu, train/fp8_amax_max, train/fp8_saturation_fraction and train/moe_load_min,
// train/moe_load_max, train/moe_load_cv, train/moe_dropped_fraction, train/moe_aux_loss.
std::vector<std::pair<std::string, double>> ProgressScalars(const fp8d::v1::WorkerEvent::Progress& progress);

class TensorBoardWriter {
 public:
  // Creates `run_dir` and a new event file in it (never appends to another process's file);
  // writes the file_version record and a SessionLog START at `first_step` (the first step this
  // process trains: 1, or the resumed checkpoint's step + 1).
  static StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& run_dir, const std::string& hostname,
                                                          int64_t unix_time, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event with every scalar of `step`, flushed to the kernel.
  Status WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  Status WriteEvent(const std::string& serialized_event);

  std::FILE* file_;
  std::string path_;
};

}  // namespace fp8::train
