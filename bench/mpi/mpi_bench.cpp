// memsafe_mpi_bench: one distributed measurement per run, one JSON line (from rank 0).
//   mpirun -np 2 memsafe_mpi_bench --task knn --n 1000000 --m 1000 --d 100 --k 10 --threads 1
//   memsafe_mpi_bench --task knn ... --threads 2          (one process: -np 1 or no mpirun)
// The database (knn) or the training points (matvec) are sharded over the ranks by rows
// (shard_reduced); every rank generates only its own rows, the same numbers whatever the number of
// ranks (a hash of the global row and column), and all ranks hold the queries. knn_both shards the
// queries too (shard_both: each rank gets its own queries' neighbours, the database shards travel
// around the ring). Reported: the time
// of the whole call (min and median over --reps after one warm-up), its communication share, the
// bytes this rank sent/received/broadcast, and the peak temporaries of the rank.
#include <memsafe/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

float value_at(std::uint64_t row, std::uint64_t col, std::uint64_t seed) {
  std::uint64_t z = row * 0x9E3779B97F4A7C15ull + col * 0xBF58476D1CE4E5B9ull + seed * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(double(z >> 11) / double(1ull << 53));
}

std::vector<float> rows_of(std::size_t b, std::size_t e, std::size_t d, std::uint64_t seed) {
  std::vector<float> v((e - b) * d);
  for (std::size_t i = b; i < e; ++i)
    for (std::size_t c = 0; c < d; ++c) v[(i - b) * d + c] = value_at(i, c, seed);
  return v;
}

std::string arg(int argc, char** argv, const char* name, const char* dflt) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::string task = arg(argc, argv, "--task", "knn");
  const std::size_t n = std::stoull(arg(argc, argv, "--n", "1000000"));
  const std::size_t m = std::stoull(arg(argc, argv, "--m", "1000"));
  const std::size_t d = std::stoull(arg(argc, argv, "--d", "3"));
  const std::size_t k = std::stoull(arg(argc, argv, "--k", "10"));
  const unsigned threads = unsigned(std::stoul(arg(argc, argv, "--threads", "1")));
  const std::size_t budget = memsafe::parse_bytes(arg(argc, argv, "--budget", "64MiB"));
  const int reps = std::stoi(arg(argc, argv, "--reps", "3"));
  const std::size_t max_chunk = std::stoull(arg(argc, argv, "--max-chunk-rows", "0"));  // knn_both: cap the ring's chunks

  const std::size_t b = n * std::size_t(rank) / std::size_t(ranks), e = n * std::size_t(rank + 1) / std::size_t(ranks);
  const auto shard = rows_of(b, e, d, 1);
  const bool both = task == "knn_both";
  const std::size_t qb = both ? m * std::size_t(rank) / std::size_t(ranks) : 0,
                    qe = both ? m * std::size_t(rank + 1) / std::size_t(ranks) : m;
  const auto queries = rows_of(qb, qe, d, 2);
  std::vector<float> v(e - b);
  for (std::size_t i = b; i < e; ++i) v[i - b] = value_at(i, 0, 3) - 0.5f;
  const auto Q = memsafe::points(queries.data(), qe - qb, d);
  const auto Y = memsafe::points(shard.data(), e - b, d);
  const memsafe::options o{budget, threads};

  std::vector<double> wall, comm;
  memsafe::mpi::comm_stats cs;
  std::size_t peak = 0;
  std::int64_t check = 0;
  for (int r = 0; r <= reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    if (task == "knn") {
      const auto res = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(Q, Y), k), MPI_COMM_WORLD,
                                          memsafe::mpi::shard_reduced, o);
      cs = res.comm;
      peak = res.stats.peak_temp_bytes;
      check = res.indices[0];
    } else if (both) {
      const auto res = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(Q, Y), k), MPI_COMM_WORLD,
                                          memsafe::mpi::shard_both_t{.max_chunk_rows = max_chunk}, o);
      cs = res.comm;
      peak = res.stats.peak_temp_bytes;
      check = res.indices.empty() ? -1 : res.indices[0];
    } else {  // matvec: K(Q, Y) v with the training points sharded
      const auto res = memsafe::mpi::eval(memsafe::rbf(Q, Y, 0.5f) * memsafe::vec(v.data(), e - b), MPI_COMM_WORLD,
                                          memsafe::mpi::shard_reduced, o);
      cs = res.comm;
      peak = res.stats.peak_temp_bytes;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) {
      wall.push_back(t);
      comm.push_back(cs.seconds);
    }
  }
  // The slowest rank's peak and communication bytes.
  std::size_t peak_max = 0, sent_max = 0;
  const std::size_t sent = cs.bytes_sent + cs.bytes_received + cs.bytes_broadcast;
  MPI_Reduce(&peak, &peak_max, 1, MPI_UNSIGNED_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&sent, &sent_max, 1, MPI_UNSIGNED_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::sort(wall.begin(), wall.end());
    std::sort(comm.begin(), comm.end());
    std::printf("{\"suite\": \"mpi\", \"task\": \"%s\", \"ranks\": %d, \"threads_per_rank\": %u, \"n\": %zu, \"m\": %zu, "
                "\"d\": %zu, \"k\": %zu, \"budget\": %zu, \"reps\": %d, \"min_s\": %.4f, \"median_s\": %.4f, "
                "\"comm_median_s\": %.5f, \"comm_bytes_max_rank\": %zu, \"chunks\": %zu, \"peak_temp_bytes_max_rank\": %zu, "
                "\"first_index\": %lld}\n",
                task.c_str(), ranks, threads, n, m, d, task != "matvec" ? k : 0, budget, reps, wall.front(),
                wall[wall.size() / 2], comm[comm.size() / 2], sent_max, cs.chunks, peak_max, (long long)check);
  }
  MPI_Finalize();
  return 0;
}
