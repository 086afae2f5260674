/// @file tfm/process_group.h
/// The processes of one job under mpirun (`mpirun -np N tfm train / embed / translate`): this process's rank,
/// and what batch jobs need to share work and gather results on rank 0. Without mpirun, or in a build without
/// MPI (CMake option TFM_MPI), the group is this process alone: rank 0 of 1.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tfm {

/// This process in a job under mpirun: its rank and the number of processes (0 and 1 without mpirun or without
/// MPI support). Only rank 0 writes files; the others should stay quiet.
struct ProcessGroup {
  int rank = 0;
  int world_size = 1;
};
ProcessGroup process_group();

/// Collectives and messages of a batch job over the process group. Every blocking call has a deadline
/// (TFM_COLLECTIVE_TIMEOUT, default 600 s, unless a call says otherwise): a peer that hangs ends the whole job
/// with a one-line message (exit code 3); a rank that dies is detected by mpirun, which ends every rank.
namespace group {

/// The half-open range [begin, end) of the units (e.g. chunks of lines) that rank `rank` (default: this
/// process's) takes, given each unit's weight (e.g. its bytes): contiguous, disjoint over the ranks, covering
/// every unit, balanced by weight (a unit goes to the rank its weight's midpoint falls in; ranges may be empty).
/// The same on every rank for the same weights. Throws std::invalid_argument for a negative weight or a rank
/// outside [0, world_size).
std::pair<int64_t, int64_t> shard(const std::vector<int64_t>& weights, int rank = -1);

/// Prints "tfm: error: <message>" ("tfm: error: rank R of N: <message>" under mpirun) on stderr and ends every
/// process of the group with exit code `code` (MPI_Abort), so that no rank waits for this one.
[[noreturn]] void abort(int code, const std::string& message);

/// Returns once every rank has called it (a no-op alone).
void barrier();

/// Whether `ok` holds on every rank (a collective: every rank calls it; alone it returns ok).
bool all(bool ok);

/// bytes[n] to rank `dest` / from rank `source`, matched by `tag` (0 <= tag < 16384); blocking, ending the job
/// after `wait_s` seconds (<= 0: TFM_COLLECTIVE_TIMEOUT) without the peer. Alone there is no peer: throws
/// std::logic_error.
void send(const void* data, int64_t bytes, int dest, int tag, double wait_s = 0);
void receive(void* data, int64_t bytes, int source, int tag, double wait_s = 0);

/// Progress summed over the ranks. Ranks other than 0 call report_progress(done) now and then (non-blocking;
/// skipped while the previous report is in flight) and report_progress(done, true) once at the end (blocking).
/// Rank 0 calls progress_sum(own): its own count plus every other rank's latest report, taken without blocking;
/// `finished` (optional) receives how many other ranks have sent their final report.
void report_progress(int64_t done, bool final = false);
int64_t progress_sum(int64_t own, int* finished = nullptr);

}  // namespace group
}  // namespace tfm
